"""Registered language-model architectures:
``fairseq-train --task language_modeling --arch transformer_lm_cycle_rev ...``.

Each family comes in three of fairseq's language-model sizes, whose defaults come from
fairseq's own functions: the plain name is ``transformer_lm``'s base size
(``base_lm_architecture``: 512/2048, 8 heads, 6 layers), ``_big`` is ``transformer_lm_big``
(1024/4096, 16 heads, 12 layers) and ``_gpt`` is ``transformer_lm_gpt`` (768/3072, 12 heads,
12 layers, GELU). All of them are pre-LN, as fairseq's ``base_lm_architecture`` forces.

Depth follows the translation families (:mod:`fairseq_shared.models.architectures`): the
sequence/cycle/cycle_rev families run twice the size's layers over as many parameter sets as
the size has layers (12 over 6 at base size, 24 over 12 for ``_big`` and ``_gpt``), so they
have the vanilla size's parameters; universal and ALBERT's attention sharing run the size's
layers over one set. Every default can be overridden on the command line.

One Wide FFN (Pires et al. 2023's encoder, the only stack a language model has):
``transformer_lm_one_wide_ffn`` ties the FFN of every layer to one (``--decoder-share-strategy
universal --decoder-share-scope ffn``; each layer keeps its LayerNorms and attention) and
widens it to the vanilla size's parameters: L FFNs of width f hold ``L (f (2d+1) + d)``, one of
width F holds ``F (2d+1) + d``, equal when ``F = Lf + (L-1) d / (2d+1)``
(:func:`~fairseq_shared.sharing.wide_ffn.one_wide_ffn_width`). Never an integer; the nearest:

=========  ===============  ==============================  =====  ==========
size       d, f, L          F exactly                       F      vs vanilla
=========  ===============  ==============================  =====  ==========
base       512, 2048, 6     12288 + 2560/1025 = 12290.498   12290  -510
``_big``   1024, 4096, 12   49152 + 11264/2049 = 49157.497  49157  -1019
``_gpt``   768, 3072, 12    36864 + 8448/1537 = 36869.496   36869  -763
=========  ===============  ==============================  =====  ==========

(``python -m fairseq_shared.cli.count_params transformer_lm transformer_lm_one_wide_ffn``:
both 35.69M at a 32,768 vocabulary; fairseq's ``transformer_lm`` is its dataclass's post-LN
defaults, with no final LayerNorm: 2d = 1,024 fewer than the pre-LN base size the difference
above is counted against.) Unlike the translation family it saves no compute: every
layer runs the one FFN, L times as wide as vanilla's, so the FFN costs L times vanilla's
multiply-adds per token. An explicit ``--decoder-ffn-embed-dim`` is the wide FFN's width as
given.

Every registered name is a function below (``grep "def transformer_lm_cycle_rev"``): for each
family of FAMILIES, the family name and the family name followed by ``_big`` and ``_gpt``:
18 names, plus the model's own name ``shared_transformer_lm`` (fairseq registers it with the
dataclass defaults, like ``transformer_lm``).
"""

from argparse import Namespace

from fairseq.models import register_model_architecture
from fairseq.models.transformer_lm import (
    base_lm_architecture,
    transformer_lm_big,
    transformer_lm_gpt,
)

from fairseq_shared.models.architectures import set_default
from fairseq_shared.models.shared_lm import MODEL
from fairseq_shared.sharing.assignment import M_STRATEGIES
from fairseq_shared.sharing.wide_ffn import one_wide_ffn_width

# family -> the decoder's sharing (strategy, scope)
FAMILIES = {
    "transformer_lm_sequence": dict(strategy="sequence", scope="all"),
    "transformer_lm_cycle": dict(strategy="cycle", scope="all"),
    "transformer_lm_cycle_rev": dict(strategy="cycle_rev", scope="all"),
    "transformer_lm_universal": dict(strategy="universal", scope="all"),
    # ALBERT's rule: Q/K/V/output projections tied across all layers, own FFN per layer.
    "transformer_lm_attn_shared": dict(strategy="universal", scope="attn"),
    # One Wide FFN (module doc): one FFN for every layer, as wide as vanilla's FFNs together
    "transformer_lm_one_wide_ffn": dict(strategy="universal", scope="ffn", wide_ffn=True),
}

SIZES = {"": base_lm_architecture, "_big": transformer_lm_big, "_gpt": transformer_lm_gpt}


def size_depth(size_fn) -> int:
    """The number of decoder layers fairseq's ``size_fn`` gives by default."""
    probe = Namespace()
    size_fn(probe)
    return probe.decoder_layers


def apply_family(args, family: str, size_fn) -> None:
    """The defaults of ``family`` (a key of FAMILIES) at the size ``size_fn`` sets."""
    sharing = FAMILIES[family]
    widen = sharing.get("wide_ffn") and getattr(args, "decoder_ffn_embed_dim", None) is None
    depth = size_depth(size_fn)
    with_sets = sharing["strategy"] in M_STRATEGIES
    set_default(args, "decoder_layers", 2 * depth if with_sets else depth)
    set_default(args, "decoder_share_strategy", sharing["strategy"])
    set_default(args, "decoder_share_scope", sharing["scope"])
    # M defaults only where it means the same thing (an M strategy, not a pattern)
    if with_sets and args.decoder_share_strategy in M_STRATEGIES:
        set_default(args, "decoder_unique_layers", depth)
    size_fn(args)
    if widen:  # the size's vanilla width is set now: the one FFN replaces the L of them
        args.decoder_ffn_embed_dim, _ = one_wide_ffn_width(
            args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.decoder_layers)


@register_model_architecture(MODEL, "transformer_lm_sequence")
def transformer_lm_sequence(args):
    apply_family(args, "transformer_lm_sequence", base_lm_architecture)


@register_model_architecture(MODEL, "transformer_lm_sequence_big")
def transformer_lm_sequence_big(args):
    apply_family(args, "transformer_lm_sequence", transformer_lm_big)


@register_model_architecture(MODEL, "transformer_lm_sequence_gpt")
def transformer_lm_sequence_gpt(args):
    apply_family(args, "transformer_lm_sequence", transformer_lm_gpt)


@register_model_architecture(MODEL, "transformer_lm_cycle")
def transformer_lm_cycle(args):
    apply_family(args, "transformer_lm_cycle", base_lm_architecture)


@register_model_architecture(MODEL, "transformer_lm_cycle_big")
def transformer_lm_cycle_big(args):
    apply_family(args, "transformer_lm_cycle", transformer_lm_big)


@register_model_architecture(MODEL, "transformer_lm_cycle_gpt")
def transformer_lm_cycle_gpt(args):
    apply_family(args, "transformer_lm_cycle", transformer_lm_gpt)


@register_model_architecture(MODEL, "transformer_lm_cycle_rev")
def transformer_lm_cycle_rev(args):
    apply_family(args, "transformer_lm_cycle_rev", base_lm_architecture)


@register_model_architecture(MODEL, "transformer_lm_cycle_rev_big")
def transformer_lm_cycle_rev_big(args):
    apply_family(args, "transformer_lm_cycle_rev", transformer_lm_big)


@register_model_architecture(MODEL, "transformer_lm_cycle_rev_gpt")
def transformer_lm_cycle_rev_gpt(args):
    apply_family(args, "transformer_lm_cycle_rev", transformer_lm_gpt)


@register_model_architecture(MODEL, "transformer_lm_universal")
def transformer_lm_universal(args):
    apply_family(args, "transformer_lm_universal", base_lm_architecture)


@register_model_architecture(MODEL, "transformer_lm_universal_big")
def transformer_lm_universal_big(args):
    apply_family(args, "transformer_lm_universal", transformer_lm_big)


@register_model_architecture(MODEL, "transformer_lm_universal_gpt")
def transformer_lm_universal_gpt(args):
    apply_family(args, "transformer_lm_universal", transformer_lm_gpt)


@register_model_architecture(MODEL, "transformer_lm_attn_shared")
def transformer_lm_attn_shared(args):
    apply_family(args, "transformer_lm_attn_shared", base_lm_architecture)


@register_model_architecture(MODEL, "transformer_lm_attn_shared_big")
def transformer_lm_attn_shared_big(args):
    apply_family(args, "transformer_lm_attn_shared", transformer_lm_big)


@register_model_architecture(MODEL, "transformer_lm_attn_shared_gpt")
def transformer_lm_attn_shared_gpt(args):
    apply_family(args, "transformer_lm_attn_shared", transformer_lm_gpt)


@register_model_architecture(MODEL, "transformer_lm_one_wide_ffn")
def transformer_lm_one_wide_ffn(args):
    apply_family(args, "transformer_lm_one_wide_ffn", base_lm_architecture)


@register_model_architecture(MODEL, "transformer_lm_one_wide_ffn_big")
def transformer_lm_one_wide_ffn_big(args):
    apply_family(args, "transformer_lm_one_wide_ffn", transformer_lm_big)


@register_model_architecture(MODEL, "transformer_lm_one_wide_ffn_gpt")
def transformer_lm_one_wide_ffn_gpt(args):
    apply_family(args, "transformer_lm_one_wide_ffn", transformer_lm_gpt)
