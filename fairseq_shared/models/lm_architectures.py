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

Every registered name is a function below (``grep "def transformer_lm_cycle_rev"``): for each
family of FAMILIES, the family name and the family name followed by ``_big`` and ``_gpt``:
15 names, plus the model's own name ``shared_transformer_lm`` (fairseq registers it with the
dataclass defaults, like ``transformer_lm``).
"""

from argparse import Namespace

from fairseq.models import register_model_architecture
from fairseq.models.transformer_lm import (
    base_lm_architecture,
    transformer_lm_big,
    transformer_lm_gpt,
)

from fairseq_shared.models.architectures import M_STRATEGIES, set_default
from fairseq_shared.models.shared_lm import MODEL

# family -> the decoder's sharing (strategy, scope)
FAMILIES = {
    "transformer_lm_sequence": dict(strategy="sequence", scope="all"),
    "transformer_lm_cycle": dict(strategy="cycle", scope="all"),
    "transformer_lm_cycle_rev": dict(strategy="cycle_rev", scope="all"),
    "transformer_lm_universal": dict(strategy="universal", scope="all"),
    # ALBERT's rule: Q/K/V/output projections tied across all layers, own FFN per layer.
    "transformer_lm_attn_shared": dict(strategy="universal", scope="attn"),
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
    depth = size_depth(size_fn)
    with_sets = sharing["strategy"] in M_STRATEGIES
    set_default(args, "decoder_layers", 2 * depth if with_sets else depth)
    set_default(args, "decoder_share_strategy", sharing["strategy"])
    set_default(args, "decoder_share_scope", sharing["scope"])
    # M defaults only where it means the same thing (an M strategy, not a pattern)
    if with_sets and args.decoder_share_strategy in M_STRATEGIES:
        set_default(args, "decoder_unique_layers", depth)
    size_fn(args)


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
