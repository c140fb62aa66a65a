"""A shared checkpoint as a plain fairseq ``transformer`` (or ``transformer_lm``) checkpoint.

The result loads in stock fairseq (no ``--user-dir``, ``torch.load`` with
``weights_only=True``): its configuration holds plain types only (dicts, lists, tuples,
strings, numbers), its model is fairseq's ``TransformerModel`` (a shared language model's:
``TransformerLanguageModel``, see :mod:`.lm`) with every layer's
parameters under their own names (tied names share one tensor, so ``torch.save`` writes
each tied tensor once), and the two sharing markers are gone.

Layers without an FFN (``--{stack}-no-ffn``) export exactly when they are pre-LN:
:func:`zero_ffn_sublayers` gives each an FFN of width 1 whose weights and biases are zero,
which fairseq's and CTranslate2's layers compute as ``x + FFN(LN(x)) = x + 0 = x``.
Post-LN ones are refused: there the sub-layer is ``LN(x + FFN(x))``, and with no FFN that is
``LN(x)``, which no LayerNorm weights make the identity.

SAN models are refused: a SAN follower layer takes its attention weights (self-attention)
or its whole attention output (encoder-decoder attention) from another layer, which neither
fairseq's Transformer layer nor CTranslate2's can do.
"""

import argparse
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Dict, Optional

import torch

logger = logging.getLogger(__name__)

#: Flags of fairseq-shared that a plain ``transformer`` does not have.
SHARED_FLAG_PREFIXES = (
    "encoder_share_", "decoder_share_", "encoder_unique_layers", "decoder_unique_layers", "san_",
    "encoder_untie_", "decoder_untie_",  # relaxed sharing (share_lora_rank: under *_share_)
    "encoder_no_ffn", "decoder_no_ffn",  # layers without FFN (zero_ffn_sublayers)
)


#: The models of fairseq-shared that the export takes.
SHARED_MODELS = ("shared_transformer", "shared_transformer_lm")


class ExportError(ValueError):
    """The checkpoint cannot be exported; the message says why."""


@dataclass
class LoadedCheckpoint:
    path: str
    state: dict
    cfg: object
    task: object
    model: object


def refuse_san(model_args) -> None:
    """Raise :class:`ExportError` when ``model_args`` use a SAN policy."""
    from fairseq_shared.models.config import san_config_from_args

    san = san_config_from_args(model_args)
    if san.active:
        policies = {
            "--san-self-policy": san.self_policy, "--san-cross-policy": san.cross_policy,
            "--san-encoder-policy": san.encoder_policy,
        }
        used = ", ".join(f"{k} {','.join(map(str, v))}" for k, v in policies.items() if v)
        raise ExportError(
            f"cannot export a SAN model ({used}): its follower layers reuse the attention "
            "weights (self-attention) or the attention output (encoder-decoder attention) "
            "of the leader layer of their block, and neither fairseq's Transformer nor "
            "CTranslate2 has a layer that takes its attention from another layer. Export "
            "a model trained without --san-* policies"
        )


def load_shared(path: str, data: Optional[str] = None) -> LoadedCheckpoint:
    """Load a fairseq-shared checkpoint (``data`` overrides where the dictionaries are)."""
    import fairseq_shared  # noqa: F401  (registers the model, compat fixes)
    from fairseq import checkpoint_utils, tasks

    if not os.path.isfile(path):
        raise ExportError(f"CHECKPOINT: no such file '{path}'")
    state = checkpoint_utils.load_checkpoint_to_cpu(path, {"data": data} if data else None)
    cfg = state["cfg"]
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    arch = getattr(cfg.model, "arch", None) or getattr(cfg.model, "_name", None)
    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch)
    if model_name not in SHARED_MODELS:
        raise ExportError(
            f"'{path}' has --arch {arch} (model {model_name}); the export takes "
            f"fairseq-shared checkpoints (model {' or '.join(SHARED_MODELS)})"
        )
    if model_name == "shared_transformer":  # the language model has no SAN flags
        refuse_san(cfg.model)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
    model.eval()
    return LoadedCheckpoint(path, state, cfg, task, model)


def plain_model_args(model_args) -> Dict:
    """The shared model's flags as a plain ``transformer``'s: ours dropped, arch renamed."""
    plain = {
        k: v for k, v in vars(model_args).items() if not k.startswith(SHARED_FLAG_PREFIXES)
    }
    plain["arch"] = plain["_name"] = "transformer"
    for stack in ("encoder", "decoder"):
        plain[f"{stack}_layers_to_keep"] = None  # already applied to the weights
    return plain


def plain_checkpoint(loaded: LoadedCheckpoint, data: Optional[str] = None) -> dict:
    """The checkpoint dict of the equivalent fairseq ``transformer``; ``data`` (the export
    directory, which holds the dictionaries) becomes its task's data directory."""
    from fairseq_shared.checkpoint_io import rebuilt_config
    from fairseq_shared.export.lm import is_language_model, plain_lm_config
    from fairseq_shared.sharing import describe

    cfg = loaded.cfg
    language_model = is_language_model(loaded.model)
    plain = plain_lm_config(cfg.model) if language_model else plain_model_args(cfg.model)
    plain_cfg = rebuilt_config(cfg, plain)
    if not language_model:
        plain_cfg["task"]["source_lang"] = loaded.task.cfg.source_lang  # inferred at load time
        plain_cfg["task"]["target_lang"] = loaded.task.cfg.target_lang
    if data:
        plain_cfg["task"]["data"] = os.path.abspath(data)
    history = [
        {k: v for k, v in h.items() if k in ("criterion_name", "optimizer_name", "num_updates")}
        for h in loaded.state.get("optimizer_history", [])[-1:]
    ] or [{"criterion_name": "", "optimizer_name": "", "num_updates": 0}]
    history[-1]["lr_scheduler_state"] = {}
    sharing = {s: describe(v.assignment, v.scope) for s, v in loaded.model.sharing.items()}
    model_state = zero_ffn_sublayers(loaded.model, loaded.model.full_state_dict(),
                                     plain_cfg["model"])
    return {
        "args": None,
        "cfg": plain_cfg,
        "model": model_state,
        "optimizer_history": history,
        "extra_state": {
            "fairseq_shared_export": {"source": os.path.abspath(loaded.path), **sharing}
        },
    }


def zero_ffn_sublayers(model, state: Dict[str, torch.Tensor], plain_model_cfg: Dict) -> Dict:
    """``state`` with an FFN of width 1, all zeros, in every layer of each stack of ``model``
    that has none (``--{stack}-no-ffn``), and ``plain_model_cfg``'s ``{stack}_ffn_embed_dim``
    set to 1 (stock layers build their FFN from it). Exact in a pre-LN layer, where the FFN
    sub-layer is ``x + fc2(act(fc1(LN(x))))`` and zero weights and biases add an exact 0 (the
    LayerNorm is fairseq's initial one, unused). One set of zero tensors serves every layer
    (saved once). A post-LN stack without FFN is refused (:class:`ExportError`)."""
    state = dict(state)
    for stack, sharing in model.sharing.items():
        if not sharing.no_ffn:
            continue
        layers = getattr(model, stack).layers
        if not layers[0].normalize_before:
            raise ExportError(
                f"cannot export a post-LN {stack} without FFNs (--{stack}-no-ffn without "
                f"--{stack}-normalize-before): fairseq's and CTranslate2's post-LN layers "
                "always end with LayerNorm(x + FFN(x)); with a zero FFN that is LayerNorm(x), "
                "not x, and no LayerNorm weights make it the identity. Export a pre-LN model"
            )
        d, like = layers[0].embed_dim, next(layers[0].parameters())
        zeros = {"fc1.weight": like.new_zeros(1, d), "fc1.bias": like.new_zeros(1),
                 "fc2.weight": like.new_zeros(d, 1), "fc2.bias": like.new_zeros(d),
                 "final_layer_norm.weight": like.new_ones(d),
                 "final_layer_norm.bias": like.new_zeros(d)}
        for i in range(len(layers)):
            state.update({f"{stack}.layers.{i}.{name}": t for name, t in zeros.items()})
        plain_model_cfg[f"{stack}_ffn_embed_dim"] = 1
    return state


def legacy_args_checkpoint(checkpoint: dict) -> dict:
    """The same checkpoint with its model configuration as an ``argparse.Namespace`` in
    ``args`` (fairseq's legacy layout), which CTranslate2's converter reads attributes of."""
    from fairseq_shared.export.lm import is_lm_checkpoint, legacy_lm_args

    legacy = dict(checkpoint)
    task = checkpoint["cfg"]["task"]
    if is_lm_checkpoint(checkpoint):
        legacy["args"] = legacy_lm_args(checkpoint)
    else:
        legacy["args"] = argparse.Namespace(**{
            **checkpoint["cfg"]["model"], "task": task["_name"],
            "source_lang": task["source_lang"], "target_lang": task["target_lang"],
        })
    legacy["cfg"] = None
    return legacy


def write_dictionaries(task, out_dir: str) -> Dict[str, str]:
    """``dict.{src}.txt`` and ``dict.{tgt}.txt`` as fairseq-preprocess writes them
    (a language model's: ``dict.txt``)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    from fairseq_shared.export.lm import write_lm_dictionary

    if isinstance(task, LanguageModelingTask):
        return write_lm_dictionary(task, out_dir)
    paths = {}
    for lang, d in ((task.cfg.source_lang, task.source_dictionary),
                    (task.cfg.target_lang, task.target_dictionary)):
        path = os.path.join(out_dir, f"dict.{lang}.txt")
        d.save(path)
        paths[lang] = path
    return paths


def write_plain(loaded: LoadedCheckpoint, out_dir: str, name: str = "checkpoint.pt") -> str:
    """Write the plain checkpoint and the dictionaries into ``out_dir``; return its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    torch.save(plain_checkpoint(loaded, out_dir), path)
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    if unsafe:  # a guarantee, not a hope: stock weights-only loading must accept it
        raise ExportError(f"{path}: the export pickled non-plain types {unsafe}")
    write_dictionaries(loaded.task, out_dir)
    spm = _sentencepiece_model(loaded.cfg)
    if spm:
        shutil.copy(spm, os.path.join(out_dir, os.path.basename(spm)))
    return path


def _sentencepiece_model(cfg) -> Optional[str]:
    """The corpus's ``spm.model`` next to ``bin/`` (this project's data layout), if any."""
    data = str(getattr(cfg.task, "data", "") or "").split(os.pathsep)[0]
    candidate = os.path.join(os.path.dirname(os.path.abspath(data)), "spm.model")
    return candidate if data and os.path.isfile(candidate) else None
