"""A translation model as a Hugging Face transformers model (``export --hf DIR``).

Two forms (``--hf-form``):

* ``shared`` (the default): :class:`~fairseq_shared.export.hf_shared_model.
  FairseqSharedForConditionalGeneration`, M2M100 with each tied tensor stored once and SAN,
  shipped as remote code beside the weights. It needs what M2M100 needs (below); a post-LN model,
  a LoRA-relaxed one (its merged layers are no longer equal) or one without FFNs falls back to
  the stock form when ``--hf-form`` is unset (:func:`choose_target` says so in the report).
* ``stock``: a stock class, every tied layer written as a copy.

Which stock class computes which fairseq Transformer exactly (checked facts:
``shared/reference/hf-export.md``):

* pre-LN (``--encoder/decoder-normalize-before``) with final LayerNorms, one joined vocabulary
  and ``--share-all-embeddings`` -> ``M2M100ForConditionalGeneration``;
* post-LN (no final norm) -> ``FSMTForConditionalGeneration`` (separate vocabularies allowed).

Everything else is refused with the reason (:func:`target_class`). SAN models export to the
shared form only. Relaxed sharing (LoRA deltas,
untied norms or biases) is exported with each delta merged into its layer's weight, as the
plain and CTranslate2 exports do; the check of :mod:`.verify` then shows the result computes the
relaxed model.

Weights keep fairseq's names under ``model.`` (the key map is the identity). In the stock form
tied layers are written as independent copies: ``save_pretrained`` drops tensors that share
memory, and a stock class would reload the dropped ones as random weights. The position tables are the classes'
own (computed, not stored). transformers is imported here and only here (and in the other
``hf_*`` modules): it is the optional extra ``fairseq_shared[export]``.
"""

import io
import os
from typing import Dict, List, Optional, Tuple

import torch

from fairseq_shared.export.plain import ExportError

M2M100, FSMT = "M2M100ForConditionalGeneration", "FSMTForConditionalGeneration"
SHARED = "FairseqSharedForConditionalGeneration"
FORMS = ("shared", "stock")  # --hf-form; unset: shared where it applies, else stock


def _get(args, name, default=None):
    return getattr(args, name, default)


def target_class(args, src_dict, tgt_dict) -> str:
    """The stock class that computes the model with flags ``args``, or :class:`ExportError`
    saying why none does (SAN models never get here: the export refuses them when it opens
    the checkpoint, :data:`fairseq_shared.export.plain.TAKES`)."""
    reasons = []
    if _get(args, "layernorm_embedding"):
        reasons.append("--layernorm-embedding (no stock class normalises the embeddings)")
    if _get(args, "encoder_learned_pos") or _get(args, "decoder_learned_pos"):
        reasons.append("learned positions (M2M100 and FSMT compute sinusoidal ones)")
    if _get(args, "no_token_positional_embeddings"):
        reasons.append("--no-token-positional-embeddings")
    if _get(args, "adaptive_softmax_cutoff"):
        reasons.append("an adaptive softmax")
    if _get(args, "cross_self_attention"):
        reasons.append("--cross-self-attention")
    if _get(args, "encoder_embed_dim") != _get(args, "decoder_embed_dim") or (
            _get(args, "decoder_output_dim", _get(args, "decoder_embed_dim"))
            != _get(args, "decoder_embed_dim")):
        reasons.append("unequal encoder, decoder and output widths (one d_model)")
    pre = (bool(_get(args, "encoder_normalize_before")), bool(_get(args, "decoder_normalize_before")))
    if pre == (True, True):
        if _get(args, "no_decoder_final_norm"):
            reasons.append("pre-LN without the decoder's final LayerNorm (--no-decoder-final-norm): "
                           "M2M100 always applies it")
        if not _get(args, "share_all_embeddings") or src_dict != tgt_dict:
            reasons.append("a pre-LN model needs one joined vocabulary and "
                           "--share-all-embeddings (M2M100 has one embedding matrix)")
        target = M2M100
    elif pre == (False, False):
        target = FSMT
    else:
        reasons.append("pre-LN on one side and post-LN on the other")
        target = None
    if reasons:
        raise ExportError("--hf: no stock transformers class computes this model: "
                          + "; ".join(reasons))
    return target


def _shared_form_refusals(model) -> List[str]:
    """Why the shared form cannot hold ``model`` (a pre-LN model M2M100 computes)."""
    reasons = []
    for stack, sharing in model.sharing.items():
        if sharing.lora_rank:
            reasons.append(f"the {stack} is LoRA-relaxed (its merged layers are no longer equal)")
        if sharing.no_ffn:
            reasons.append(f"the {stack}'s layers have no FFN")
    return reasons


def choose_target(loaded, form: Optional[str]) -> Tuple[str, Optional[str]]:
    """The class to write (``form``: :data:`FORMS` or None) and, when an unset ``--hf-form``
    falls back to the stock form, why; :class:`ExportError` for a model neither form takes."""
    from fairseq_shared.tools.checkpoints import uses_san

    args, task = loaded.cfg.model, loaded.task
    stock = target_class(args, task.source_dictionary, task.target_dictionary)
    reasons = _shared_form_refusals(loaded.model)
    if stock != M2M100:
        reasons.insert(0, "it is post-LN (the shared form is M2M100's pre-LN Transformer)")
    san = uses_san(args)
    if form == "stock" or (form is None and reasons and not san):
        if san:
            raise ExportError("--hf-form stock: a SAN model has no stock class (its followers "
                              "take their attention from another layer); use --hf-form shared")
        note = None if form else ("stock form (tied layers written as copies): "
                                  + "; ".join(reasons))
        return stock, note
    if reasons:
        raise ExportError("--hf-form shared: " + "; ".join(reasons) + (
            "; a SAN model exports only to the shared form" if san else
            "; allowed: --hf-form stock"))
    return SHARED, None


def shared_fields(model, args) -> Dict:
    """The shared form's configuration: each stack's layer-to-set map, the names of the tied
    parameters inside a layer (from the model's own ties), the SAN policy."""
    from fairseq_shared.san.flags import san_config_from_args

    tied: Dict[str, set] = {}
    for alias in model.tied_aliases:
        stack, _, index_name = alias.partition(".layers.")
        tied.setdefault(stack, set()).add(index_name.partition(".")[2])
    san = san_config_from_args(args)
    return {
        "layer_sets": {stack: list(s.assignment) for stack, s in model.sharing.items()},
        "tied_names": {stack: sorted(names) for stack, names in tied.items()},
        "san": {"self": san.self_policy, "cross": san.cross_policy,
                "encoder": san.encoder_policy, "cross_reuse": san.cross_reuse},
    }


def config(target: str, args, src_dict, tgt_dict, shared: Optional[Dict] = None):
    """The transformers configuration of the fairseq model (``shared``: the fields of
    :func:`shared_fields`, for the shared form)."""
    import transformers

    common = dict(
        d_model=args.encoder_embed_dim,
        encoder_layers=args.encoder_layers, decoder_layers=args.decoder_layers,
        encoder_attention_heads=args.encoder_attention_heads,
        decoder_attention_heads=args.decoder_attention_heads,
        encoder_ffn_dim=args.encoder_ffn_embed_dim, decoder_ffn_dim=args.decoder_ffn_embed_dim,
        activation_function=str(_get(args, "activation_fn", "relu")),
        dropout=args.dropout, attention_dropout=_get(args, "attention_dropout", 0.0),
        activation_dropout=_get(args, "activation_dropout", 0.0),
        encoder_layerdrop=0.0, decoder_layerdrop=0.0,
        max_position_embeddings=max(args.max_source_positions, args.max_target_positions),
        scale_embedding=not _get(args, "no_scale_embedding", False),
        pad_token_id=tgt_dict.pad(), bos_token_id=tgt_dict.bos(), eos_token_id=tgt_dict.eos(),
        decoder_start_token_id=tgt_dict.eos(),  # fairseq's decoder starts from EOS
    )
    if target == SHARED:
        from fairseq_shared.export.hf_shared_model import FairseqSharedConfig

        return FairseqSharedConfig(vocab_size=len(tgt_dict), tie_word_embeddings=True,
                                   **shared, **common)
    if target == M2M100:
        return transformers.M2M100Config(vocab_size=len(tgt_dict), tie_word_embeddings=True,
                                         **common)
    return transformers.FSMTConfig(
        langs=["src", "tgt"], src_vocab_size=len(src_dict), tgt_vocab_size=len(tgt_dict),
        tie_word_embeddings=False, forced_eos_token_id=None, **common)


def hf_state_dict(target: str, plain: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The fairseq (plain, every layer under its name) weights under the class's names, each
    an independent copy."""
    skip = ("version", "_float_tensor", "embed_positions")
    out = {}
    for key, value in plain.items():
        if key.split(".")[-1] in skip or ".embed_positions." in key or key.endswith("version"):
            continue
        if target in (M2M100, SHARED):
            if key in ("encoder.embed_tokens.weight", "decoder.output_projection.weight"):
                if not torch.equal(value, plain["decoder.embed_tokens.weight"]):
                    raise ExportError(f"--hf: {key} is not the decoder embedding, which "
                                      "M2M100 ties it to")
                continue
            if key == "decoder.embed_tokens.weight":
                out["model.shared.weight"] = value.detach().clone()
                continue
        out[f"model.{key}"] = value.detach().clone()
    return out


def build(target: str, cfg, state: Dict[str, torch.Tensor]):
    """The class built from ``cfg`` with ``state`` loaded; every parameter accounted for."""
    import transformers

    if target == SHARED:
        from fairseq_shared.export.hf_shared_model import FairseqSharedForConditionalGeneration

        model = FairseqSharedForConditionalGeneration(cfg).eval()
    else:
        model = getattr(transformers, target)(cfg).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
            "lm_head.weight"}
    missing = [k for k in missing if k not in tied and "embed_positions" not in k
               and k not in model.all_tied_weights_keys]
    if missing or unexpected:
        raise ExportError(f"--hf: the weights do not fit {target}: missing {missing[:5]}, "
                          f"unexpected {unexpected[:5]}")
    return model


def check_ties(model, fairseq_model) -> None:
    """:class:`ExportError` unless the shared form ties exactly the layers fairseq ties."""
    ours = {t: s for t, s in model.all_tied_weights_keys.items() if ".layers." in t}
    theirs = {f"model.{a}": f"model.{o}" for a, o in fairseq_model.tied_aliases.items()}
    if ours != theirs:
        differ = sorted(set(ours.items()) ^ set(theirs.items()))
        raise ExportError(f"--hf: the shared form would tie other layers than the model does, "
                          f"e.g. {differ[:3]}")


def disk_report(out_dir: str, shared_model) -> Dict:
    """Bytes on disk of the weights against the shared model's unique fp32 weights (plus the
    sinusoidal position tables that FSMT stores as weights; M2M100 computes its own), and
    against fairseq's weights (``torch.save`` of its state dict)."""
    from safetensors import safe_open

    stored = positions = 0
    for name in os.listdir(out_dir):
        if not name.endswith(".safetensors"):
            continue
        path = os.path.join(out_dir, name)
        stored += os.path.getsize(path)
        with safe_open(path, "pt") as f:
            positions += sum(f.get_tensor(k).numel() * 4 for k in f.keys() if "embed_positions" in k)
    unique = sum(p.numel() * 4 for p in shared_model.parameters())
    fairseq = io.BytesIO()
    torch.save(shared_model.state_dict(), fairseq)  # what fairseq stores (tied tensors once)
    return {"safetensors_bytes": stored, "unique_fp32_weight_bytes": unique,
            "position_table_bytes": positions, "fairseq_weights_bytes": fairseq.tell(),
            "ratio_to_fairseq": round(stored / fairseq.tell(), 4),
            "ratio_to_unique": round((stored - positions) / unique, 4),
            "why": ("tied tensors stored once" if _is_shared_form(out_dir) else
                    "tied layers written as copies (save_pretrained drops shared tensors)")}


def _is_shared_form(out_dir: str) -> bool:
    import json

    with open(os.path.join(out_dir, "config.json")) as f:
        return json.load(f).get("model_type") == "fairseq_shared"


def write(loaded, out_dir: str, generation: Dict, target: str, spm: Optional[str]) -> List[str]:
    """Write the model as ``target`` (:func:`choose_target`), its tokenizer (``spm``: the
    corpus's sentencepiece model, None: none) and generation configuration into ``out_dir``;
    return the notes of the tokenizer."""
    from fairseq_shared.export import hf_generation, hf_tokenizer

    task, args = loaded.task, loaded.cfg.model
    src, tgt = task.source_dictionary, task.target_dictionary
    shared = shared_fields(loaded.model, args) if target == SHARED else None
    model = build(target, config(target, args, src, tgt, shared),
                  hf_state_dict(target, loaded.model.full_state_dict()))
    if target == SHARED:
        check_ties(model, loaded.model)
    model.generation_config = hf_generation.generation_config(tgt, **generation)
    if target == SHARED:
        from fairseq_shared.export.hf_shared_model import auto_map

        model.config.auto_map = auto_map()  # AutoModel too
    model.save_pretrained(out_dir)
    return hf_tokenizer.write(out_dir, src, tgt, spm)
