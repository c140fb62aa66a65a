"""The width of one shared FFN that carries the parameters of the FFNs it replaces.

Pure arithmetic (used by the One Wide FFN families of
:mod:`~fairseq_shared.models.architectures` and :mod:`~fairseq_shared.models.lm_architectures`).
An FFN sub-layer of model width d and hidden width f has ``fc1`` (d x f + f) and ``fc2``
(f x d + d): ``f (2d + 1) + d`` parameters; its LayerNorm has 2d more. One wide FFN of width F
that replaces FFNs holding P parameters matches them when ``F (2d + 1) + d = P``, that is
``F = (P - d) / (2d + 1)``. That is rarely an integer: :func:`wide_ffn_width` gives the nearest
and the difference it leaves.
"""

from typing import Tuple


def ffn_params(d: int, f: int) -> int:
    """Parameters of one FFN sub-layer's ``fc1`` and ``fc2`` (biases included)."""
    return f * (2 * d + 1) + d


def wide_ffn_width(d: int, replaced: int) -> Tuple[int, int]:
    """``(F, difference)``: the width F of one FFN of model width ``d`` nearest to holding
    ``replaced`` parameters, and ``ffn_params(d, F) - replaced`` (negative: fewer)."""
    width = (2 * (replaced - d) + (2 * d + 1)) // (2 * (2 * d + 1))  # round half up, exactly
    return width, ffn_params(d, width) - replaced


def one_wide_ffn_width(d_enc: int, f_enc: int, enc_layers: int, d_dec: int = 0, f_dec: int = 0,
                       dec_layers: int = 0, decoder_ffn: bool = False) -> Tuple[int, int]:
    """One Wide FFN (Pires et al. 2023): the width of the one FFN shared by every encoder
    layer so that the model has the parameters of the vanilla model whose ``enc_layers``
    encoder layers each have an FFN of width ``f_enc``, and whose decoder's ``dec_layers``
    FFNs of width ``f_dec`` (with their LayerNorms) the model drops (``decoder_ffn`` False;
    True: the decoder keeps its FFNs and nothing is added for it). The encoder's layers keep
    their own LayerNorms. A decoder-only language model is the "encoder" here, with no decoder.
    Returns ``(F, difference)`` as :func:`wide_ffn_width`.
    """
    replaced = enc_layers * ffn_params(d_enc, f_enc)
    if not decoder_ffn:
        replaced += dec_layers * (ffn_params(d_dec, f_dec) + 2 * d_dec)
    return wide_ffn_width(d_enc, replaced)
