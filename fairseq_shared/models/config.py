"""The model's flags and their one validation: parameter sharing and SAN.

``fairseq-train --arch shared_transformer`` (and every registered architecture) takes the
flags :func:`add_args` adds: ``--{encoder,decoder}-share-strategy/-unique-layers/-share-scope``
(:mod:`fairseq_shared.sharing`), ``--{encoder,decoder}-no-ffn`` (layers without their FFN
sub-layer, :mod:`fairseq_shared.modules.no_ffn`), the relaxed-sharing flags
``--{encoder,decoder}-share-lora-rank/-untie-norms/-untie-biases``
(:mod:`fairseq_shared.modules.lora`) and ``--san-{self,cross,encoder}-policy``,
``--san-cross-reuse`` (:mod:`fairseq_shared.san`). :func:`model_config` checks every rule
once, before the model is built, and returns a :class:`ModelConfig`; every error is a
``ValueError`` (:class:`~fairseq_shared.sharing.SharingConfigError` or
:class:`~fairseq_shared.policy.PolicyError`) that names the flag and the allowed values.
The modules that apply a configuration trust it. The architectures' defaults for these
flags are in :mod:`fairseq_shared.models.architectures`.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from fairseq_shared.policy import FLAGS, PolicyError, is_trivial, parse_policy
from fairseq_shared.sharing import (
    SCOPES,
    SharingConfigError,
    describe,
    layer_assignment,
    restrict,
    validate_scope,
)

STACKS = ("encoder", "decoder")


# ---------------------------------------------------------------------------- sharing
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
            getattr(args, f"{stack}_share_strategy", "none") or "none",
            num_layers,
            getattr(args, f"{stack}_unique_layers", None),
            stack=stack,
        )
        scope = validate_scope(getattr(args, f"{stack}_share_scope", "all") or "all", stack)
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
            help=f"how {stack} layers map to parameter sets: none, sequence, cycle, cycle_rev, "
            "universal, or an explicit 1-based pattern such as 1,2,3,3,2,1",
        )
        parser.add_argument(
            f"--{stack}-unique-layers",
            type=int,
            metavar="M",
            help=f"number of distinct parameter sets M in the {stack} (1 <= M <= "
            f"--{stack}-layers); needed by sequence, cycle and cycle_rev",
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
                "that ties layers (sequence, cycle, cycle_rev, universal, or a pattern that "
                "repeats a set)"
            )
    return relaxation


def sharing_plan(args) -> Dict[str, StackSharing]:
    """Validate the sharing flags of ``args`` and return the plan for both stacks."""
    return {stack: StackSharing.from_args(args, stack) for stack in STACKS}


# ---------------------------------------------------------------------------- SAN
CROSS_REUSE = ("output", "context")
SAN_ARGS = ("san_self_policy", "san_cross_policy", "san_encoder_policy", "san_cross_reuse")


@dataclass(frozen=True)
class SANConfig:
    self_policy: Optional[List[int]] = None
    cross_policy: Optional[List[int]] = None
    encoder_policy: Optional[List[int]] = None
    cross_reuse: str = "output"

    @property
    def decoder_active(self) -> bool:
        return not (is_trivial(self.self_policy) and is_trivial(self.cross_policy))

    @property
    def active(self) -> bool:
        return self.decoder_active or not is_trivial(self.encoder_policy)


def add_san_args(parser) -> None:
    parser.add_argument(
        "--san-self-policy", type=str, metavar="BLOCKS",
        help="decoder self-attention sharing (Xiao et al. 2019): adjacent block sizes summing "
        "to --decoder-layers, e.g. 1,5; each block's first layer computes the attention "
        "weights, the others reuse them with their own values. Unset or all 1s: no sharing",
    )
    parser.add_argument(
        "--san-cross-policy", type=str, metavar="BLOCKS",
        help="decoder encoder-decoder attention sharing: block sizes summing to "
        "--decoder-layers, e.g. 2,2,2; followers reuse the leader's attention output",
    )
    parser.add_argument(
        "--san-cross-reuse", type=str, metavar="WHERE", choices=CROSS_REUSE,
        help="where encoder-decoder followers reuse the leader's attention: output (after its "
        "output projection; no attention parameters in followers; default, faster) or "
        "context (before it; each follower keeps its own output projection)",
    )
    parser.add_argument(
        "--san-encoder-policy", type=str, metavar="BLOCKS",
        help="encoder self-attention sharing (not in the paper; off by default): block "
        "sizes summing to --encoder-layers",
    )


def _refuse_with(condition: bool, flags: str, why: str, allowed: str) -> None:
    if condition:
        raise PolicyError(f"{flags}: {why}; allowed: {allowed}")


def san_config_from_args(args) -> SANConfig:
    """Validate the SAN flags of ``args`` against the rest of the model's flags."""

    def get(name):
        value = getattr(args, name, None)
        return None if value in (None, "", "none") else value

    reuse = get("san_cross_reuse") or "output"
    _refuse_with(reuse not in CROSS_REUSE, "--san-cross-reuse", f"unknown value '{reuse}'",
                 ", ".join(CROSS_REUSE))

    def policy(kind: str, name: str, num_layers: int) -> Optional[List[int]]:
        text = get(name)
        return parse_policy(text, num_layers, FLAGS[kind]) if text else None

    config = SANConfig(
        policy("self", "san_self_policy", args.decoder_layers),
        policy("cross", "san_cross_policy", args.decoder_layers),
        policy("encoder", "san_encoder_policy", args.encoder_layers),
        reuse,
    )
    cross_on = not is_trivial(config.cross_policy)
    self_on = not is_trivial(config.self_policy)
    encoder_on = not is_trivial(config.encoder_policy)
    _refuse_with(cross_on and bool(getattr(args, "no_cross_attention", False)), FLAGS["cross"],
                 "the model has no encoder-decoder attention (--no-cross-attention)", "leave it unset")
    _refuse_with(self_on and bool(getattr(args, "cross_self_attention", False)), FLAGS["self"],
                 "not supported with --cross-self-attention", "leave it unset")
    _refuse_with(config.decoder_active and (getattr(args, "decoder_layerdrop", 0) or 0) > 0,
                 f"{FLAGS['self']}/{FLAGS['cross']}",
                 "a dropped leader would leave its followers without attention",
                 "with --decoder-layerdrop 0 only")
    _refuse_with(encoder_on and (getattr(args, "encoder_layerdrop", 0) or 0) > 0, FLAGS["encoder"],
                 "a dropped leader would leave its followers without attention",
                 "with --encoder-layerdrop 0 only")
    _refuse_with(config.active and bool(getattr(args, "checkpoint_activations", False)),
                 "--san-*-policy", "layers wrapped for --checkpoint-activations",
                 "without --checkpoint-activations only")
    _refuse_with(config.active and getattr(args, "ddp_backend", None) == "fully_sharded",
                 "--san-*-policy", "layers wrapped for --ddp-backend fully_sharded",
                 "another --ddp-backend only")
    return config


# ---------------------------------------------------------------------------- both
def add_args(parser) -> None:
    """Every flag of the shared model, on top of fairseq's Transformer flags."""
    add_sharing_args(parser)
    add_san_args(parser)


@dataclass(frozen=True)
class ModelConfig:
    """A validated configuration: the sharing plan of each stack and the SAN policies."""

    sharing: Dict[str, StackSharing]
    san: SANConfig


def model_config(args) -> ModelConfig:
    """Validate every sharing and SAN flag of ``args`` (once, before anything is built)."""
    plan = sharing_plan(args)
    san = san_config_from_args(args)
    _refuse_pruned_san(plan, san)
    return ModelConfig(plan, san)


def _refuse_pruned_san(plan: Dict[str, StackSharing], san) -> None:
    policies = {"encoder": [san.encoder_policy], "decoder": [san.self_policy, san.cross_policy]}
    for stack, sharing in plan.items():
        if sharing.kept is not None and not all(is_trivial(p) for p in policies[stack]):
            raise SharingConfigError(
                f"--{stack}-layers-to-keep cannot prune a {stack} with a SAN policy: a "
                "follower reuses the attention of its block's leader, which pruning may "
                "remove; allowed: leave --{stack}-layers-to-keep unset, or convert the "
                "model to a policy without sharing first (python -m "
                "fairseq_shared.cli.convert_policy)".replace("{stack}", stack)
            )
