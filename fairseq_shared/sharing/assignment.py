"""Which layer uses which parameter set, and which parameters a sharing scope ties.

Pure functions only: everything here can be tested without building a model. This module
owns the strategies and scopes, their defaults (:data:`DEFAULT_STRATEGY`,
:data:`DEFAULT_SCOPE`) and the strategies that need M (:data:`M_STRATEGIES`); every other
module imports them from here.

Set indices returned by :func:`layer_assignment` are 0-based (layer ``i`` uses set
``assignment[i]``); the papers and the ``--*-share-strategy`` pattern syntax are 1-based.

The named strategies are exactly Takase & Kiyono's code (github.com/takase/share_layer_params,
``fairseq/models/transformer.py``), whose flag is k = layers per set and M = ceil(N/k). One
rule for all three: an M that no k gives is refused (:func:`valid_set_counts`); sequence uses
the smallest k that gives M, k = ceil(N/M). Any other map is an explicit pattern.
"""

import math
import re
from typing import List, Optional, Sequence

from fairseq_shared.errors import FairseqSharedError

STRATEGIES = ("none", "sequence", "cycle", "cycle_rev", "universal")
#: The named strategies that need M (``--{stack}-unique-layers``); none and universal fix it.
M_STRATEGIES = ("sequence", "cycle", "cycle_rev")
SCOPES = ("all", "attn", "ffn")
#: A stack whose flags name no strategy or scope: no sharing; a strategy ties whole layers.
DEFAULT_STRATEGY = "none"
DEFAULT_SCOPE = "all"

# Sub-module name prefixes of fairseq's Transformer{Encoder,Decoder}LayerBase tied by each scope.
# "all" ties every parameter of the layer, LayerNorms included (Takase & Kiyono's code does).
_SCOPE_PREFIXES = {
    "attn": ("self_attn.", "encoder_attn."),  # Q, K, V and output projections (ALBERT rule)
    "ffn": ("fc1.", "fc2."),
}


class SharingConfigError(FairseqSharedError):
    """An invalid sharing flag; the message names the flag and the allowed values."""


class SharingMismatchError(FairseqSharedError):
    """A state saved under one sharing configuration cannot be loaded exactly into another;
    the message names both configurations."""


def _allowed_strategies() -> str:
    return ", ".join(STRATEGIES) + ", or an explicit pattern such as 1,2,3,3,2,1"


def is_pattern(strategy: str) -> bool:
    return "," in strategy or strategy.strip().isdigit()


_INTEGER = re.compile(r"\s*[+-]?\d+\s*")


def comma_separated_ints(text: str) -> List[int]:
    """``"1,2, 3"`` -> ``[1, 2, 3]``: the one syntax of the integer lists the flags take
    (sharing patterns here, SAN policies in :mod:`fairseq_shared.san.policy`). Every entry is an
    integer; an empty entry (``1,,5``, ``1,5,``) or another separator (``1 5``) raises
    ValueError rather than being read as some other list."""
    entries = text.split(",")
    if not all(_INTEGER.fullmatch(e) for e in entries):
        raise ValueError(f"not a comma-separated list of integers: {text!r}")
    return [int(e) for e in entries]


def parse_pattern(pattern: str, num_layers: int, flag: str) -> List[int]:
    """Parse a 1-based pattern like ``1,2,3,3,2,1`` into 0-based set indices."""
    try:
        ids = comma_separated_ints(pattern)
    except ValueError:
        raise SharingConfigError(
            f"{flag}: '{pattern}' is not a valid value; allowed: {_allowed_strategies()}"
        ) from None
    if len(ids) != num_layers:
        raise SharingConfigError(
            f"{flag}: pattern '{pattern}' has {len(ids)} entries but the stack has "
            f"{num_layers} layers; give exactly one set id per layer"
        )
    used = sorted(set(ids))
    if used != list(range(1, len(used) + 1)):
        raise SharingConfigError(
            f"{flag}: pattern '{pattern}' must use every set id from 1 to its maximum "
            f"{max(ids)} with no gaps (ids >= 1); it uses {used}"
        )
    return [i - 1 for i in ids]


def valid_set_counts(num_layers: int) -> List[int]:
    """Values of M that the authors' code can express for N layers (every strategy).

    Takase & Kiyono's code (github.com/takase/share_layer_params,
    ``fairseq/models/transformer.py``, ``--share-layer-num``) is parameterised by
    k = layers per set and builds M = ceil(N / k) sets. An M no k produces (N=6, M=4) is
    refused by sequence, cycle and cycle_rev alike: give an explicit pattern instead.
    """
    return sorted({math.ceil(num_layers / k) for k in range(1, num_layers + 1)})


def _cycle_rev(N: int, M: int) -> List[int]:
    """The authors' cycle_reverse, step by step as their code builds the stack: the M base
    layers, then N - 2M cycled layers (none when N < 2M), then the base layers in reverse
    order for the remaining positions (N=10, M=4: 1 2 3 4 1 2 4 3 2 1; N=5, M=3: 1 2 3 3 2)."""
    sets = list(range(M)) + [i % M for i in range(max(N - 2 * M, 0))]
    sets += [M - 1 - (i % M) for i in range(N - len(sets))]
    return sets


def layer_assignment(
    strategy: str,
    num_layers: int,
    num_sets: Optional[int] = None,
    stack: str = "encoder",
) -> List[int]:
    """Return the 0-based parameter-set index of each of ``num_layers`` layers.

    ``strategy`` is one of :data:`STRATEGIES` or an explicit 1-based pattern.
    ``num_sets`` is M (``--{stack}-unique-layers``); ``None`` means the strategy's
    natural default (N for none, 1 for universal, required otherwise).
    """
    strategy_flag = f"--{stack}-share-strategy"
    sets_flag = f"--{stack}-unique-layers"
    N = num_layers
    if N < 1:
        raise SharingConfigError(f"--{stack}-layers must be >= 1, got {N}")
    if strategy is None:
        strategy = DEFAULT_STRATEGY
    strategy = strategy.strip()

    if is_pattern(strategy):
        assignment = parse_pattern(strategy, N, strategy_flag)
        if num_sets is not None and num_sets != max(assignment) + 1:
            raise SharingConfigError(
                f"{sets_flag}={num_sets} contradicts {strategy_flag}={strategy} "
                f"(which uses {max(assignment) + 1} sets); drop {sets_flag} or make them agree"
            )
        return assignment
    if strategy not in STRATEGIES:
        raise SharingConfigError(
            f"{strategy_flag}: unknown strategy '{strategy}'; allowed: {_allowed_strategies()}"
        )

    if strategy == "none":
        if num_sets is not None and num_sets != N:
            raise SharingConfigError(
                f"{sets_flag}={num_sets} needs a sharing strategy; with {strategy_flag}=none "
                f"it must be {N} (the layer count) or unset. Allowed strategies: "
                f"{_allowed_strategies()}"
            )
        return list(range(N))
    if strategy == "universal":
        if num_sets is not None and num_sets != 1:
            raise SharingConfigError(
                f"{sets_flag}={num_sets} contradicts {strategy_flag}=universal, which uses "
                f"exactly 1 set; drop {sets_flag} or set it to 1"
            )
        return [0] * N

    if num_sets is None:
        raise SharingConfigError(
            f"{strategy_flag}={strategy} needs {sets_flag} (M, an integer with 1 <= M <= {N})"
        )
    M = num_sets
    if not 1 <= M <= N:
        raise SharingConfigError(
            f"{sets_flag} must satisfy 1 <= M <= {stack} layers ({N}); got {M}"
        )
    k = math.ceil(N / M)  # layers per set: the smallest k that gives M sets
    if math.ceil(N / k) != M:
        raise SharingConfigError(
            f"{sets_flag}={M} cannot be expressed by the {strategy} strategy for {N} layers "
            f"(the authors' code takes k layers per set and builds M = ceil(N/k) sets); "
            f"allowed values: {valid_set_counts(N)}, or give an explicit pattern "
            f"to {strategy_flag}"
        )
    if strategy == "sequence":
        return [i // k for i in range(N)]
    if strategy == "cycle":
        return [i % M for i in range(N)]
    return _cycle_rev(N, M)


def validate_scope(scope: str, stack: str = "encoder") -> str:
    if scope not in SCOPES:
        raise SharingConfigError(
            f"--{stack}-share-scope: unknown scope '{scope}'; allowed: {', '.join(SCOPES)}"
        )
    return scope


def in_scope(param_name: str, scope: str) -> bool:
    """Whether the layer-relative parameter name is tied under ``scope``."""
    if scope == "all":
        return True
    return param_name.startswith(_SCOPE_PREFIXES[scope])


def format_assignment(assignment: Sequence[int]) -> str:
    """1-based, as in the papers: ``1 2 3 3 2 1``."""
    return " ".join(str(s + 1) for s in assignment)


def canonical(assignment: Sequence[int]) -> List[int]:
    """Renumber sets in order of first use (``[2, 0, 2] -> [0, 1, 0]``): the partition only."""
    first: dict = {}
    return [first.setdefault(s, len(first)) for s in assignment]


def describe(assignment: Sequence[int], scope: str) -> str:
    """A layer-to-set map in words: the named strategy that gives it, when one does.

    ``describe([0, 1, 2, 2, 1, 0], "all") == "cycle_rev M=3 (1 2 3 3 2 1), scope=all"``.
    """
    a = canonical(assignment)
    N, M = len(a), max(a) + 1 if a else 0
    name = "pattern"
    if M == N:
        name = "none (no sharing)"
    elif M == 1:
        name = "universal"
    else:
        for strategy in M_STRATEGIES:
            try:
                if layer_assignment(strategy, N, M) == a:
                    name = f"{strategy} M={M}"
                    break
            except SharingConfigError:
                break
    return f"{name} ({format_assignment(a)}), scope={scope}"


def restrict(assignment: Sequence[int], kept: Sequence[int], stack: str = "encoder") -> List[int]:
    """The sets of the positions LayerDrop pruning keeps (``--{stack}-layers-to-keep``).

    Each kept layer keeps its set; set ids are renumbered in order of first use.
    """
    flag = f"--{stack}-layers-to-keep"
    N = len(assignment)
    if not kept or len(set(kept)) != len(kept) or any(not 0 <= i < N for i in kept):
        raise SharingConfigError(
            f"{flag}: {','.join(map(str, kept))} must name distinct 0-based layer indices "
            f"between 0 and {N - 1} (the {stack} has {N} layers)"
        )
    return canonical([assignment[i] for i in sorted(kept)])
