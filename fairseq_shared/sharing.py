"""Which layer uses which parameter set, and which parameters a sharing scope ties.

Pure functions only: everything here can be tested without building a model.

Set indices returned by :func:`layer_assignment` are 0-based (layer ``i`` uses set
``assignment[i]``); the papers and the ``--*-share-strategy`` pattern syntax are 1-based.
"""

import math
from typing import List, Optional, Sequence

STRATEGIES = ("none", "sequence", "cycle", "cycle_rev", "universal")
SCOPES = ("all", "attn", "ffn")

# Sub-module name prefixes of fairseq's Transformer{Encoder,Decoder}LayerBase tied by each scope.
# "all" ties every parameter of the layer, LayerNorms included (Takase & Kiyono's code does).
_SCOPE_PREFIXES = {
    "attn": ("self_attn.", "encoder_attn."),  # Q, K, V and output projections (ALBERT rule)
    "ffn": ("fc1.", "fc2."),
}


class SharingConfigError(ValueError):
    """An invalid sharing flag; the message names the flag and the allowed values."""


def _allowed_strategies() -> str:
    return ", ".join(STRATEGIES) + ", or an explicit pattern such as 1,2,3,3,2,1"


def is_pattern(strategy: str) -> bool:
    return "," in strategy or strategy.strip().isdigit()


def parse_pattern(pattern: str, num_layers: int, flag: str) -> List[int]:
    """Parse a 1-based pattern like ``1,2,3,3,2,1`` into 0-based set indices."""
    try:
        ids = [int(x) for x in pattern.split(",")]
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


def valid_sequence_set_counts(num_layers: int) -> List[int]:
    """Values of M that the authors' sequence strategy can express for N layers.

    Takase & Kiyono's code is parameterised by k = layers per set and uses
    M = ceil(N / k) sets; layer i (0-based) uses set i // k.
    """
    return sorted({math.ceil(num_layers / k) for k in range(1, num_layers + 1)})


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
        strategy = "none"
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
    if strategy == "sequence":
        k = math.ceil(N / M)
        if math.ceil(N / k) != M:
            raise SharingConfigError(
                f"{sets_flag}={M} cannot be expressed by the sequence strategy for {N} layers "
                f"(the authors' code uses k = ceil(N/M) layers per set and M = ceil(N/k) sets); "
                f"allowed values: {valid_sequence_set_counts(N)}, or give an explicit pattern "
                f"to {strategy_flag}"
            )
        return [i // k for i in range(N)]
    if strategy == "cycle":
        return [i % M for i in range(N)]
    # cycle_rev: cycle over the first N - M layers, then the last M layers use sets M..1.
    return [i % M if i < N - M else N - 1 - i for i in range(N)]


def num_sets(assignment: Sequence[int]) -> int:
    return max(assignment) + 1


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
