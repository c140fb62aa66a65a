"""A translation model as a stock Hugging Face transformers class (``export --hf DIR``).

Which class computes which fairseq Transformer exactly (checked facts:
``shared/reference/hf-export.md``):

* pre-LN (``--encoder/decoder-normalize-before``) with final LayerNorms, one joined vocabulary
  and ``--share-all-embeddings`` -> ``M2M100ForConditionalGeneration``;
* post-LN (no final norm) -> ``FSMTForConditionalGeneration`` (separate vocabularies allowed).

Everything else is refused with the reason (:func:`target_class`). Relaxed sharing (LoRA deltas,
untied norms or biases) is exported with each delta merged into its layer's weight, as the
plain and CTranslate2 exports do; the check of :mod:`.verify` then shows the result computes the
relaxed model.

Weights keep fairseq's names under ``model.`` (the key map is the identity). Tied layers are
written as independent copies: ``save_pretrained`` drops tensors that share memory, and a stock
class would reload the dropped ones as random weights. The position tables are the classes'
own (computed, not stored). transformers is imported here and only here (and in the other
``hf_*`` modules): it is the optional extra ``fairseq_shared[export]``.
"""

import os
from typing import Dict, List, Tuple

import torch

from fairseq_shared.export.plain import ExportError

M2M100, FSMT = "M2M100ForConditionalGeneration", "FSMTForConditionalGeneration"


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


def config(target: str, args, src_dict, tgt_dict):
    """The transformers configuration of the fairseq model."""
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
        if target == M2M100:
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

    model = getattr(transformers, target)(cfg).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
            "lm_head.weight"}
    missing = [k for k in missing if k not in tied and "embed_positions" not in k]
    if missing or unexpected:
        raise ExportError(f"--hf: the weights do not fit {target}: missing {missing[:5]}, "
                          f"unexpected {unexpected[:5]}")
    return model


def disk_report(out_dir: str, shared_model) -> Dict:
    """Bytes on disk of the weights against the shared model's unique fp32 weights (plus the
    sinusoidal position tables that FSMT stores as weights; M2M100 computes its own)."""
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
    return {"safetensors_bytes": stored, "unique_fp32_weight_bytes": unique,
            "position_table_bytes": positions,
            "ratio_to_unique": round((stored - positions) / unique, 4),
            "why": "tied layers written as copies (save_pretrained drops shared tensors)"}


def write(loaded, out_dir: str, generation: Dict) -> Tuple[str, List[str]]:
    """Write the model, tokenizer and generation configuration into ``out_dir``; return the
    class name and the notes of the tokenizer."""
    from fairseq_shared.export import hf_generation, hf_tokenizer
    from fairseq_shared.export.plain import _sentencepiece_model

    task, args = loaded.task, loaded.cfg.model
    src, tgt = task.source_dictionary, task.target_dictionary
    target = target_class(args, src, tgt)
    model = build(target, config(target, args, src, tgt),
                  hf_state_dict(target, loaded.model.full_state_dict()))
    model.generation_config = hf_generation.generation_config(tgt, **generation)
    model.save_pretrained(out_dir)
    notes = hf_tokenizer.write(out_dir, src, tgt, _sentencepiece_model(loaded.cfg))
    return target, notes
