"""Closed-form parameter counts of (shared) Transformers, checked against built models.

Covers fairseq's standard translation Transformer: sinusoidal positions, no adaptive
softmax/input, no layernorm_embedding, attention key/value dims equal to the model dim.
"""

from typing import Optional, Sequence


def attention_params(d: int) -> int:
    return 4 * (d * d + d)  # q, k, v, out projections with bias


def ffn_params(d: int, f: int) -> int:
    return d * f + f + f * d + d


def layer_norm_params(d: int) -> int:
    return 2 * d


def stack_params(
    d: int, f: int, assignment: Sequence[int], scope: str, decoder: bool, no_ffn: bool = False
) -> int:
    """Unique parameters of one stack of layers tied by ``assignment`` under ``scope``;
    ``no_ffn``: layers without the FFN sub-layer (its fc1, fc2 and LayerNorm)."""
    n_layers, n_sets = len(assignment), max(assignment) + 1
    attn = attention_params(d) * (2 if decoder else 1)
    ffn = 0 if no_ffn else ffn_params(d, f)
    norms = layer_norm_params(d) * ((3 if decoder else 2) - no_ffn)
    if scope == "all":
        return n_sets * (attn + ffn + norms)
    if scope == "attn":
        return n_sets * attn + n_layers * (ffn + norms)
    if scope == "ffn":
        return n_sets * ffn + n_layers * (attn + norms)
    raise ValueError(f"unknown scope {scope}")


def model_params(
    vocab_src: int,
    vocab_tgt: int,
    d: int,
    f: int,
    encoder_assignment: Sequence[int],
    decoder_assignment: Sequence[int],
    encoder_scope: str = "all",
    decoder_scope: str = "all",
    share_all_embeddings: bool = False,
    share_decoder_input_output_embed: bool = False,
    normalize_before: bool = False,
    encoder_no_ffn: bool = False,
    decoder_no_ffn: bool = False,
    encoder_f: Optional[int] = None,
) -> int:
    """``encoder_f``: the encoder's FFN width when it is not ``f`` (the decoder's)."""
    embeddings = vocab_src * d
    if not share_all_embeddings:
        embeddings += vocab_tgt * d
    if not (share_all_embeddings or share_decoder_input_output_embed):
        embeddings += vocab_tgt * d  # output projection
    final_norms = 2 * layer_norm_params(d) if normalize_before else 0
    return (
        embeddings
        + final_norms
        + stack_params(d, encoder_f or f, encoder_assignment, encoder_scope, decoder=False,
                       no_ffn=encoder_no_ffn)
        + stack_params(d, f, decoder_assignment, decoder_scope, decoder=True,
                       no_ffn=decoder_no_ffn)
    )
