"""The SAN flags (``--san-{self,cross,encoder}-policy``, ``--san-cross-reuse``) and their
validation against the rest of the model's flags.

:func:`san_config_from_args` returns a :class:`SANConfig`; every error is a
:class:`~fairseq_shared.san.policy.PolicyError` naming the flag and the allowed values. The
model's one validation entry, which adds the sharing flags, is
:func:`fairseq_shared.models.config.model_config`.
"""

from dataclasses import dataclass
from typing import List, Optional

from fairseq_shared.san.policy import FLAGS, PolicyError, format_policy, is_trivial, parse_policy

#: Where encoder-decoder followers reuse the leader's attention; the first is the default.
DEFAULT_CROSS_REUSE = "output"
CROSS_REUSE = (DEFAULT_CROSS_REUSE, "context")
SAN_ARGS = ("san_self_policy", "san_cross_policy", "san_encoder_policy", "san_cross_reuse")


@dataclass(frozen=True)
class SANConfig:
    self_policy: Optional[List[int]] = None
    cross_policy: Optional[List[int]] = None
    encoder_policy: Optional[List[int]] = None
    cross_reuse: str = DEFAULT_CROSS_REUSE

    @property
    def decoder_active(self) -> bool:
        return not (is_trivial(self.self_policy) and is_trivial(self.cross_policy))

    @property
    def active(self) -> bool:
        return self.decoder_active or not is_trivial(self.encoder_policy)

    def flags(self) -> str:
        """The policies given, as flags: ``--san-self-policy 1,3, --san-cross-policy 2,2``."""
        policies = ((FLAGS["self"], self.self_policy), (FLAGS["cross"], self.cross_policy),
                    (FLAGS["encoder"], self.encoder_policy))
        return ", ".join(f"{flag} {format_policy(p)}" for flag, p in policies if p)


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

    reuse = get("san_cross_reuse") or DEFAULT_CROSS_REUSE
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
