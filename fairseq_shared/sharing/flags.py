"""The parameter-sharing flags of a stack and their validation.

``--{encoder,decoder}-share-strategy/-unique-layers/-share-scope`` (the layer-to-set map:
:mod:`fairseq_shared.sharing.assignment`), ``--{stack}-no-ffn`` (layers without their FFN
sub-layer: :mod:`fairseq_shared.sharing.no_ffn`) and the relaxed-sharing flags
``--{stack}-share-lora-rank/-untie-norms/-untie-biases`` (:mod:`fairseq_shared.sharing.lora`).
:meth:`StackSharing.from_args` checks them against each other and against the rest of the
model's flags; every error is a :class:`~fairseq_shared.sharing.assignment.SharingConfigError`
naming the flag and the allowed values. The model's one validation entry, which adds the SAN
flags, is :func:`fairseq_shared.models.config.model_config`.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_shared.sharing.assignment import (
    DEFAULT_SCOPE,
    DEFAULT_STRATEGY,
    M_STRATEGIES,
    SCOPES,
    STRATEGIES,
    SharingConfigError,
    describe,
    layer_assignment,
    restrict,
    validate_scope,
)

STACKS = ("encoder", "decoder")

@dataclass(frozen=True)
class StackSharing:
    """How one stack (encoder or decoder) shares parameters.

    ``assignment`` is the set of each layer the stack is built with; after LayerDrop
    pruning that is ``full_assignment`` restricted to the ``kept`` positions.
    """

    stack: str
    assignment: List[int]  # 0-based set index per built layer
    scope: str
    full_assignment: Optional[List[int]] = None  # before pruning; None: nothing pruned
    kept: Optional[Tuple[int, ...]] = None  # original positions of the built layers
    # relaxed sharing: each position of a tied set gets its own rank-R delta on every tied
    # Linear weight, and with the switches its own LayerNorms / biases of tied Linears
    lora_rank: int = 0
    untie_norms: bool = False
    untie_biases: bool = False
    no_ffn: bool = False  # every layer of the stack without its FFN sub-layer

    @classmethod
    def from_args(cls, args, stack: str) -> "StackSharing":
        num_layers = getattr(args, f"{stack}_layers")
        assignment = layer_assignment(
            getattr(args, f"{stack}_share_strategy", None) or DEFAULT_STRATEGY,
            num_layers,
            getattr(args, f"{stack}_unique_layers", None),
            stack=stack,
        )
        scope = validate_scope(getattr(args, f"{stack}_share_scope", None) or DEFAULT_SCOPE,
                               stack)
        no_ffn = no_ffn_from_args(args, stack, scope)
        relaxation = relaxation_from_args(args, stack, assignment, scope)
        keep = getattr(args, f"{stack}_layers_to_keep", None)
        if not keep:
            return cls(stack=stack, assignment=assignment, scope=scope, no_ffn=no_ffn,
                       **relaxation)
        try:
            items = keep if isinstance(keep, (list, tuple)) else str(keep).split(",")
            kept = tuple(sorted(int(i) for i in items))
        except ValueError:
            raise SharingConfigError(
                f"--{stack}-layers-to-keep: '{keep}' is not a comma-separated list of layer "
                "indices such as 0,2,4"
            ) from None
        pruned = restrict(assignment, kept, stack)
        if max(pruned) + 1 == len(pruned):  # the kept positions tie nothing: nothing to relax
            relaxation = dict(RIGID)
        return cls(stack, pruned, scope, assignment, kept, no_ffn=no_ffn, **relaxation)

    def describe(self) -> str:
        return describe(self.assignment, self.scope) + describe_relaxation(
            self.lora_rank, self.untie_norms, self.untie_biases
        ) + (", no FFN" if self.no_ffn else "")

    @property
    def relaxed(self) -> bool:
        return bool(self.lora_rank or self.untie_norms or self.untie_biases)

    def pruned_args(self) -> Dict[str, object]:
        """The flags that rebuild the built (pruned) stack as it is: its map as a pattern and
        its relaxation (none when the kept positions tie nothing: loading merges their
        deltas into their own weights)."""
        return {
            f"{self.stack}_share_strategy": self.pruned_pattern(),
            f"{self.stack}_unique_layers": None,
            f"{self.stack}_share_lora_rank": self.lora_rank,
            f"{self.stack}_untie_norms": self.untie_norms,
            f"{self.stack}_untie_biases": self.untie_biases,
        }

    def pruned_pattern(self) -> str:
        """The built (pruned) stack as a ``--{stack}-share-strategy`` pattern."""
        return ",".join(str(s + 1) for s in self.assignment)

    @property
    def num_sets(self) -> int:
        return max(self.assignment) + 1

    @property
    def is_shared(self) -> bool:
        return self.num_sets < len(self.assignment)


def add_sharing_args(parser) -> None:
    for stack in STACKS:
        parser.add_argument(
            f"--{stack}-share-strategy",
            type=str,
            metavar="STRATEGY",
            help=f"how {stack} layers map to parameter sets: {', '.join(STRATEGIES)}, or an "
            "explicit 1-based pattern such as 1,2,3,3,2,1",
        )
        parser.add_argument(
            f"--{stack}-unique-layers",
            type=int,
            metavar="M",
            help=f"number of distinct parameter sets M in the {stack} (1 <= M <= "
            f"--{stack}-layers); needed by {', '.join(M_STRATEGIES)}",
        )
        parser.add_argument(
            f"--{stack}-share-scope",
            type=str,
            metavar="SCOPE",
            help=f"what sharing ties in the {stack}: all (attention, FFN and LayerNorms), "
            "attn (Q/K/V/output projections only; each layer keeps its own FFN), or ffn "
            f"(FFN only). Allowed: {', '.join(SCOPES)}",
        )
        parser.add_argument(
            f"--{stack}-no-ffn",
            action="store_true",
            help=f"{stack} layers without their feed-forward sub-layer (Pires et al. 2023 drop "
            "the decoder's): each layer is its attention sub-layer(s) only. The other sharing "
            f"flags apply to what the layers keep (--{stack}-share-scope ffn is refused)",
        )
        parser.add_argument(
            f"--{stack}-share-lora-rank",
            type=int,
            metavar="R",
            help=f"relaxed sharing (Bae et al. 2025): every {stack} layer whose parameter set "
            "is used by more than one layer gets its own rank-R delta B A on each tied Linear "
            "weight, W = W_set + B A (B starts at zero: the model starts rigidly tied). "
            "0 (default): off. Needs a sharing strategy that ties layers",
        )
        parser.add_argument(
            f"--{stack}-untie-norms",
            action="store_true",
            help=f"each {stack} layer keeps its own LayerNorms even when --{stack}-share-scope "
            "ties them (scope all; attn and ffn tie no LayerNorms anyway)",
        )
        parser.add_argument(
            f"--{stack}-untie-biases",
            action="store_true",
            help=f"each {stack} layer keeps its own biases of the tied Linears "
            "(EdgeFormer-style per-layer bias)",
        )


#: The relaxation fields of :class:`StackSharing` when sharing is rigid (flags off).
RIGID = {"lora_rank": 0, "untie_norms": False, "untie_biases": False}

#: What each ``--{stack}-*`` sharing flag means when it is not given (``{stack}_{name}``):
#: no sharing, rigid, with FFNs. The architectures fill these in for unset flags.
STACK_DEFAULTS = {
    "share_strategy": DEFAULT_STRATEGY,
    "unique_layers": None,
    "share_scope": DEFAULT_SCOPE,
    "share_lora_rank": RIGID["lora_rank"],
    "untie_norms": RIGID["untie_norms"],
    "untie_biases": RIGID["untie_biases"],
    "no_ffn": False,
}


def describe_relaxation(lora_rank: int, untie_norms: bool, untie_biases: bool) -> str:
    """``", LoRA rank 4, untied norms"``; empty when sharing is rigid."""
    parts = [f"LoRA rank {lora_rank}"] if lora_rank else []
    parts += ["untied norms"] if untie_norms else []
    parts += ["untied biases"] if untie_biases else []
    return "".join(f", {p}" for p in parts)


def _lora_rank(value, flag: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str) and value.strip().isdigit():  # --model-overrides pass strings
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SharingConfigError(
            f"{flag}: '{value}' is not a rank; allowed: an integer >= 0 (0: off)"
        )
    return value


def _refuse_lora_rank_above_width(args, stack: str, scope: str, rank: int, flag: str) -> None:
    """A delta of rank R on a d_out x d_in weight is full-rank once R >= min(d_out, d_in);
    a larger R only adds parameters. The width is the smallest side of the stack's tied
    Linear weights: its embedding dim, its FFN dim (scopes all, ffn) and, for the decoder's
    encoder-decoder K/V projections, the encoder's embedding dim (scopes all, attn)."""
    dims = {"embedding dim": getattr(args, f"{stack}_embed_dim", None)}
    if scope in ("all", "ffn"):
        dims["FFN dim"] = getattr(args, f"{stack}_ffn_embed_dim", None)
    if stack == "decoder" and scope in ("all", "attn"):
        dims["encoder embedding dim"] = getattr(args, "encoder_embed_dim", None)
    dims = {k: v for k, v in dims.items() if isinstance(v, int) and v > 0}
    width = min(dims.values(), default=None)
    if width is not None and rank > width:
        sides = ", ".join(f"{k} {v}" for k, v in dims.items())
        raise SharingConfigError(f"{flag}: rank {rank} is above the {stack}'s width {width} "
                                 f"({sides}); allowed: 0 (off) to {width}")


def _switch(value, flag: str) -> bool:
    if value in (None, False, "", "false", "False", "0"):  # also 0
        return False
    if value in (True, "true", "True", "1"):  # also 1
        return True
    raise SharingConfigError(f"{flag}: '{value}' is not a switch; allowed: true or false")


def no_ffn_from_args(args, stack: str, scope: str) -> bool:
    """Validate ``--{stack}-no-ffn`` against the flags that need the FFN it removes."""
    flag = f"--{stack}-no-ffn"
    if not _switch(getattr(args, f"{stack}_no_ffn", None), flag):
        return False
    if scope == "ffn":
        rank = _lora_rank(getattr(args, f"{stack}_share_lora_rank", None), "")
        relaxed = f" nor for --{stack}-share-lora-rank {rank} to relax" if rank else ""
        raise SharingConfigError(
            f"--{stack}-share-scope ffn: the {stack} has no FFN ({flag}), so there is nothing "
            f"to tie{relaxed}; allowed: all or attn (they tie what the layers keep), or leave "
            f"{flag} off"
        )
    normformer = [f"--{n.replace('_', '-')}" for n in ("scale_fc", "scale_resids")
                  if stack == "decoder" and _switch(getattr(args, n, None), f"--{n}")]
    if normformer:
        raise SharingConfigError(
            f"{'/'.join(normformer)}: NormFormer's scaling of the FFN sub-layer, which {flag} "
            "removes; allowed: leave it off"
        )
    return True


def relaxation_from_args(args, stack: str, assignment: List[int], scope: str) -> Dict:
    """Validate the relaxed-sharing flags of one stack (``assignment``: before pruning)."""
    rank_flag = f"--{stack}-share-lora-rank"
    relaxation = {
        "lora_rank": _lora_rank(getattr(args, f"{stack}_share_lora_rank", None), rank_flag),
        **{
            name: _switch(getattr(args, f"{stack}_{name}", None), f"--{stack}-{flag}")
            for name, flag in (("untie_norms", "untie-norms"), ("untie_biases", "untie-biases"))
        },
    }
    _refuse_lora_rank_above_width(args, stack, scope, relaxation["lora_rank"], rank_flag)
    ties_nothing = max(assignment) + 1 == len(assignment)
    flags = {"lora_rank": f"{rank_flag} {relaxation['lora_rank']}",
             "untie_norms": f"--{stack}-untie-norms", "untie_biases": f"--{stack}-untie-biases"}
    for name, flag in flags.items():
        if relaxation[name] and ties_nothing:
            allowed = "0 (off)" if name == "lora_rank" else "leave it off"
            raise SharingConfigError(
                f"{flag}: the {stack} ties no parameters ({describe(assignment, scope)}), so "
                f"there is nothing to relax; allowed: {allowed}, or a --{stack}-share-strategy "
                f"that ties layers ({', '.join(s for s in STRATEGIES if s != DEFAULT_STRATEGY)}, "
                "or a pattern that repeats a set)"
            )
    return relaxation


def sharing_plan(args, stacks: Sequence[str] = STACKS) -> Dict[str, StackSharing]:
    """Validate the sharing flags of ``args`` and return the plan of each of ``stacks``."""
    return {stack: StackSharing.from_args(args, stack) for stack in stacks}


