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
fairseq's Transformer layer nor CTranslate2's can do. The shared Hugging Face form
(:mod:`.hf_shared_model`) can: ``load_shared(..., san=True)`` opens them for it.
"""

import logging
import os
from typing import Dict, Optional

import torch

from fairseq_shared import checkpoint_io
from fairseq_shared.checkpoint_io import KINDS
from fairseq_shared.errors import FairseqSharedError
from fairseq_shared.export import kinds

from fairseq_shared.models import architectures, shared_lm
from fairseq_shared.sharing.assignment import describe
from fairseq_shared.tools.checkpoints import Loaded, Takes, open_checkpoint, with_config

logger = logging.getLogger(__name__)


class ExportError(FairseqSharedError):
    """The checkpoint cannot be exported; the message says why."""


#: The models of fairseq-shared that the export takes, SAN refused (the module doc).
TAKES = Takes("export", (architectures.MODEL, shared_lm.MODEL), san=(
    "its follower layers reuse the attention weights (self-attention) or the attention output "
    "(encoder-decoder attention) of the leader layer of their block, and neither fairseq's "
    "Transformer nor CTranslate2 has a layer that takes its attention from another layer. "
    "Export a model trained without --san-* policies"), error=ExportError)


#: The same for an export to the shared Hugging Face form only, which takes SAN models.
TAKES_SAN = Takes("export", TAKES.models, san=None, error=ExportError)


def load_shared(path: str, data: Optional[str] = None, san: bool = False) -> Loaded:
    """Open a fairseq-shared checkpoint (``data`` overrides where the dictionaries are;
    ``san``: SAN models too). Its ``kind``, decided there from the task, is what the rest of
    the export reads (a checkpoint of another task is refused here)."""
    loaded = open_checkpoint(path, "export", TAKES_SAN if san else TAKES, expect=None, data=data)
    if loaded.kind is None:
        raise ExportError(
            f"{path}: task '{loaded.cfg.task._name}' is neither a translation nor a language "
            f"modeling task; the export takes {' and '.join(KINDS.values())} checkpoints")
    return loaded


def plain_checkpoint(loaded: Loaded, data: Optional[str] = None) -> dict:
    """The checkpoint dict of the equivalent fairseq ``transformer``; ``data`` (the export
    directory, which holds the dictionaries) becomes its task's data directory. Only what
    stock fairseq reads is kept (the configuration by the tools' one rule,
    :func:`~fairseq_shared.tools.checkpoints.with_config`)."""
    cfg = loaded.cfg
    checkpoint = with_config({}, cfg, None)
    plain_cfg = checkpoint["cfg"]
    plain_cfg["model"] = kinds.of(loaded.kind).plain_config(cfg.model, loaded.task, plain_cfg)
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
    checkpoint.update({
        "model": model_state,
        "optimizer_history": history,
        "extra_state": {
            "fairseq_shared_export": {"source": os.path.abspath(loaded.path), **sharing}
        },
    })
    return checkpoint


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


def write_plain(checkpoint: dict, out_dir: str, name: str = "checkpoint.pt") -> str:
    """Write the plain ``checkpoint`` (:func:`plain_checkpoint`) into ``out_dir``; return its
    path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    checkpoint_io.save(checkpoint, path)  # refuses non-finite weights
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    if unsafe:  # a guarantee, not a hope: stock weights-only loading must accept it
        raise ExportError(f"{path}: the export pickled non-plain types {unsafe}")
    return path


def write_inputs(loaded: Loaded, out_dir: str, spm: Optional[str]) -> None:
    """The dictionaries and the corpus's sentencepiece model ``spm`` (None: none), into
    ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    kinds.of(loaded.kind).write_dictionaries(loaded.task, out_dir)
    if spm:
        checkpoint_io.copy_file(spm, os.path.join(out_dir, os.path.basename(spm)))


def sentencepiece_model(cfg) -> Optional[str]:
    """The corpus's ``spm.model`` next to ``bin/`` (this project's data layout), if any."""
    data = str(getattr(cfg.task, "data", "") or "").split(os.pathsep)[0]
    candidate = os.path.join(os.path.dirname(os.path.abspath(data)), "spm.model")
    return candidate if data and os.path.isfile(candidate) else None
