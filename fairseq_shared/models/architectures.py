"""Registered architectures: ``fairseq-train --arch transformer_cycle_rev ...``.

Each sharing family comes in fairseq's four sizes: the plain name is base size
(512/2048, 8 heads, as in Takase & Kiyono's table), then ``_iwslt_de_en`` (512/1024,
4 heads), ``_wmt_en_de`` (= base) and ``_wmt_en_de_big`` (1024/4096, 16 heads,
dropout 0.3). Every default can still be overridden on the command line.

Every registered name is a function below, so ``grep "def transformer_cycle_rev"`` finds
it: ``shared_transformer`` and, for each family of FAMILIES (``transformer_sequence``,
``transformer_cycle``, ``transformer_cycle_rev``, ``transformer_universal``,
``transformer_attn_shared``, ``transformer_san``, ``transformer_one_wide_ffn``,
``transformer_one_wide_ffn_nodec``), the family name and the family name followed by
``_iwslt_de_en``, ``_wmt_en_de`` and ``_wmt_en_de_big``: 33 names.

One Wide FFN (Pires et al. 2023, arXiv 2309.01826): ``transformer_one_wide_ffn`` ties the FFN
of every encoder layer to one (``--encoder-share-strategy universal --encoder-share-scope
ffn``; each layer keeps its LayerNorms), drops the decoder's FFN sub-layers
(``--decoder-no-ffn``: fc1, fc2 and their LayerNorm) and widens the one encoder FFN so that
the model has the vanilla size's parameters. With model width d, FFN width f and L + L layers,
vanilla's FFN sub-layers hold ``2L (f (2d+1) + d)`` parameters and the decoder's FFN
LayerNorms ``2L d`` more; one FFN of width F holds ``F (2d+1) + d``; equal when
``F = 2Lf + (4L-1) d / (2d+1)`` (:func:`~fairseq_shared.sharing.wide_ffn.one_wide_ffn_width`).
Not an integer at any size; the nearest width and what it leaves against vanilla:

==============================  =========  ==================================  =====  =======
size                            d, f, L    F exactly                           F      vs vanilla
==============================  =========  ==================================  =====  =======
base, ``_wmt_en_de``            512, 2048  24576 + 11776/1025 = 24587.489       24587  -501
``_iwslt_de_en``                512, 1024  12288 + 11776/1025 = 12299.489       12299  -501
``_wmt_en_de_big``              1024, 4096 49152 + 23552/2049 = 49163.494       49163  -1013
==============================  =========  ==================================  =====  =======

(``python -m fairseq_shared.cli.count_params transformer transformer_one_wide_ffn`` shows
both as 60.92M at a 32,768 joint vocabulary; ``_iwslt_de_en`` 48.32M, ``_wmt_en_de_big``
209.91M.) The width follows the size's d, f and depths,
overridden ones included; an explicit ``--encoder-ffn-embed-dim`` is the wide FFN's width as
given. ``transformer_one_wide_ffn_nodec`` is the paper's other row: only the decoder's FFN
sub-layers dropped, the encoder vanilla, nothing widened, so it has ``L (f (2d+1) + 3d)``
fewer parameters than vanilla (12,604,416 at base size: 48.31M). Both families' decoders have no FFN
whatever the flags (``--decoder-no-ffn`` is a switch): for FFNs there, use another family.
"""

from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_iwslt_de_en,
    transformer_wmt_en_de,
    transformer_wmt_en_de_big,
)

from fairseq_shared.san.flags import DEFAULT_CROSS_REUSE, SAN_ARGS
from fairseq_shared.san.policy import format_policy, paper_cross_policy, paper_self_policy
from fairseq_shared.sharing.assignment import M_STRATEGIES
from fairseq_shared.sharing.flags import STACK_DEFAULTS, STACKS
from fairseq_shared.sharing.wide_ffn import one_wide_ffn_width

MODEL = "shared_transformer"

# family -> sharing defaults applied to both stacks (Takase & Kiyono: each stack on its own).
FAMILIES = {
    "transformer_sequence": dict(layers=12, strategy="sequence", unique_layers=6, scope="all"),
    "transformer_cycle": dict(layers=12, strategy="cycle", unique_layers=6, scope="all"),
    "transformer_cycle_rev": dict(layers=12, strategy="cycle_rev", unique_layers=6, scope="all"),
    "transformer_universal": dict(layers=6, strategy="universal", unique_layers=None, scope="all"),
    # ALBERT's rule: Q/K/V/output projections tied across all layers, own FFN per layer.
    "transformer_attn_shared": dict(
        layers=6, strategy="universal", unique_layers=None, scope="attn"
    ),
    # Xiao et al. 2019 attention-weight sharing (SAN), no parameter sharing by default;
    # default policies: self {1},{2..N}, cross pairs (the paper's 6-layer policy).
    "transformer_san": dict(layers=6, strategy="none", unique_layers=None, scope="all", san=True),
    # Pires et al. 2023 (module doc): a stack's own keys override the family's for it;
    # wide_ffn: the one encoder FFN widened to the vanilla size's parameters
    "transformer_one_wide_ffn": dict(
        layers=6, strategy="none", unique_layers=None, scope="all", wide_ffn=True,
        encoder=dict(strategy="universal", scope="ffn"), decoder=dict(no_ffn=True),
    ),
    "transformer_one_wide_ffn_nodec": dict(
        layers=6, strategy="none", unique_layers=None, scope="all", decoder=dict(no_ffn=True),
    ),
}

SIZES = {
    "": transformer_wmt_en_de,
    "_iwslt_de_en": transformer_iwslt_de_en,
    "_wmt_en_de": transformer_wmt_en_de,
    "_wmt_en_de_big": transformer_wmt_en_de_big,
}


def set_default(args, name, value):
    """fairseq leaves unset model flags absent (or None); only then apply ``value``."""
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def san_base_defaults(args) -> None:
    for name in SAN_ARGS:
        set_default(args, name, DEFAULT_CROSS_REUSE if name == "san_cross_reuse" else None)


def san_paper_defaults(args) -> None:
    """transformer_san: the paper's learned 6-layer policy, self {1},{2-6} and cross
    {1,2},{3,4},{5,6}, generalised to N layers as {1},{2..N} and pairs."""
    n = args.decoder_layers
    if getattr(args, "san_self_policy", None) is None:
        args.san_self_policy = format_policy(paper_self_policy(n))
    if getattr(args, "san_cross_policy", None) is None:
        args.san_cross_policy = format_policy(paper_cross_policy(n))


def shared_base_architecture(args):
    for stack in STACKS:
        for name, value in STACK_DEFAULTS.items():  # no sharing, rigid, with FFNs
            set_default(args, f"{stack}_{name}", value)
    san_base_defaults(args)
    base_architecture(args)


@register_model_architecture(MODEL, MODEL)
def shared_transformer(args):
    shared_base_architecture(args)


def apply_family(args, family, size_fn):
    """The defaults of ``family`` (a key of FAMILIES) at the size ``size_fn`` sets."""
    family_defaults = FAMILIES[family]
    widen = family_defaults.get("wide_ffn") and getattr(args, "encoder_ffn_embed_dim", None) is None
    for stack in STACKS:
        sharing = {**family_defaults, **family_defaults.get(stack, {})}
        set_default(args, f"{stack}_layers", sharing["layers"])
        set_default(args, f"{stack}_share_strategy", sharing["strategy"])
        set_default(args, f"{stack}_share_scope", sharing["scope"])
        # M defaults only where it means the same thing: for sequence/cycle/cycle_rev
        # families and a sequence/cycle/cycle_rev strategy (universal needs no M).
        if sharing["strategy"] in M_STRATEGIES and (
            getattr(args, f"{stack}_share_strategy") in M_STRATEGIES
        ):
            set_default(args, f"{stack}_unique_layers", sharing["unique_layers"])
        if sharing.get("no_ffn"):  # a switch: argparse's default is False, not unset
            setattr(args, f"{stack}_no_ffn", True)
    size_fn(args)
    if widen:  # the size's vanilla widths are set now: the one encoder FFN replaces them
        args.encoder_ffn_embed_dim, _ = one_wide_ffn_width(
            args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_layers,
            args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.decoder_layers,
            decoder_ffn=not args.decoder_no_ffn,
        )
    if family_defaults.get("san"):
        san_paper_defaults(args)
    shared_base_architecture(args)


@register_model_architecture(MODEL, "transformer_sequence")
def transformer_sequence(args):
    apply_family(args, "transformer_sequence", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_sequence_iwslt_de_en")
def transformer_sequence_iwslt_de_en(args):
    apply_family(args, "transformer_sequence", transformer_iwslt_de_en)


@register_model_architecture(MODEL, "transformer_sequence_wmt_en_de")
def transformer_sequence_wmt_en_de(args):
    apply_family(args, "transformer_sequence", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_sequence_wmt_en_de_big")
def transformer_sequence_wmt_en_de_big(args):
    apply_family(args, "transformer_sequence", transformer_wmt_en_de_big)


@register_model_architecture(MODEL, "transformer_cycle")
def transformer_cycle(args):
    apply_family(args, "transformer_cycle", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_cycle_iwslt_de_en")
def transformer_cycle_iwslt_de_en(args):
    apply_family(args, "transformer_cycle", transformer_iwslt_de_en)


@register_model_architecture(MODEL, "transformer_cycle_wmt_en_de")
def transformer_cycle_wmt_en_de(args):
    apply_family(args, "transformer_cycle", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_cycle_wmt_en_de_big")
def transformer_cycle_wmt_en_de_big(args):
    apply_family(args, "transformer_cycle", transformer_wmt_en_de_big)


@register_model_architecture(MODEL, "transformer_cycle_rev")
def transformer_cycle_rev(args):
    apply_family(args, "transformer_cycle_rev", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_cycle_rev_iwslt_de_en")
def transformer_cycle_rev_iwslt_de_en(args):
    apply_family(args, "transformer_cycle_rev", transformer_iwslt_de_en)


@register_model_architecture(MODEL, "transformer_cycle_rev_wmt_en_de")
def transformer_cycle_rev_wmt_en_de(args):
    apply_family(args, "transformer_cycle_rev", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_cycle_rev_wmt_en_de_big")
def transformer_cycle_rev_wmt_en_de_big(args):
    apply_family(args, "transformer_cycle_rev", transformer_wmt_en_de_big)


@register_model_architecture(MODEL, "transformer_universal")
def transformer_universal(args):
    apply_family(args, "transformer_universal", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_universal_iwslt_de_en")
def transformer_universal_iwslt_de_en(args):
    apply_family(args, "transformer_universal", transformer_iwslt_de_en)


@register_model_architecture(MODEL, "transformer_universal_wmt_en_de")
def transformer_universal_wmt_en_de(args):
    apply_family(args, "transformer_universal", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_universal_wmt_en_de_big")
def transformer_universal_wmt_en_de_big(args):
    apply_family(args, "transformer_universal", transformer_wmt_en_de_big)


@register_model_architecture(MODEL, "transformer_attn_shared")
def transformer_attn_shared(args):
    apply_family(args, "transformer_attn_shared", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_attn_shared_iwslt_de_en")
def transformer_attn_shared_iwslt_de_en(args):
    apply_family(args, "transformer_attn_shared", transformer_iwslt_de_en)


@register_model_architecture(MODEL, "transformer_attn_shared_wmt_en_de")
def transformer_attn_shared_wmt_en_de(args):
    apply_family(args, "transformer_attn_shared", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_attn_shared_wmt_en_de_big")
def transformer_attn_shared_wmt_en_de_big(args):
    apply_family(args, "transformer_attn_shared", transformer_wmt_en_de_big)


@register_model_architecture(MODEL, "transformer_san")
def transformer_san(args):
    apply_family(args, "transformer_san", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_san_iwslt_de_en")
def transformer_san_iwslt_de_en(args):
    apply_family(args, "transformer_san", transformer_iwslt_de_en)


@register_model_architecture(MODEL, "transformer_san_wmt_en_de")
def transformer_san_wmt_en_de(args):
    apply_family(args, "transformer_san", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_san_wmt_en_de_big")
def transformer_san_wmt_en_de_big(args):
    apply_family(args, "transformer_san", transformer_wmt_en_de_big)


@register_model_architecture(MODEL, "transformer_one_wide_ffn")
def transformer_one_wide_ffn(args):
    apply_family(args, "transformer_one_wide_ffn", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_one_wide_ffn_iwslt_de_en")
def transformer_one_wide_ffn_iwslt_de_en(args):
    apply_family(args, "transformer_one_wide_ffn", transformer_iwslt_de_en)


@register_model_architecture(MODEL, "transformer_one_wide_ffn_wmt_en_de")
def transformer_one_wide_ffn_wmt_en_de(args):
    apply_family(args, "transformer_one_wide_ffn", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_one_wide_ffn_wmt_en_de_big")
def transformer_one_wide_ffn_wmt_en_de_big(args):
    apply_family(args, "transformer_one_wide_ffn", transformer_wmt_en_de_big)


@register_model_architecture(MODEL, "transformer_one_wide_ffn_nodec")
def transformer_one_wide_ffn_nodec(args):
    apply_family(args, "transformer_one_wide_ffn_nodec", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_one_wide_ffn_nodec_iwslt_de_en")
def transformer_one_wide_ffn_nodec_iwslt_de_en(args):
    apply_family(args, "transformer_one_wide_ffn_nodec", transformer_iwslt_de_en)


@register_model_architecture(MODEL, "transformer_one_wide_ffn_nodec_wmt_en_de")
def transformer_one_wide_ffn_nodec_wmt_en_de(args):
    apply_family(args, "transformer_one_wide_ffn_nodec", transformer_wmt_en_de)


@register_model_architecture(MODEL, "transformer_one_wide_ffn_nodec_wmt_en_de_big")
def transformer_one_wide_ffn_nodec_wmt_en_de_big(args):
    apply_family(args, "transformer_one_wide_ffn_nodec", transformer_wmt_en_de_big)
