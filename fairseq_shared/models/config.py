"""The model's flags and their one validation: parameter sharing and SAN.

``fairseq-train --arch shared_transformer`` (and every registered architecture) takes the
flags :func:`add_args` adds: the sharing flags of each stack
(:mod:`fairseq_shared.sharing.flags`) and the SAN flags (:mod:`fairseq_shared.san.flags`).
:func:`model_config` is the one validation entry: it checks every rule once, before the model
is built, and returns a :class:`ModelConfig`; every error is a ``ValueError``
(:class:`~fairseq_shared.sharing.assignment.SharingConfigError` or
:class:`~fairseq_shared.san.policy.PolicyError`) that names the flag and the allowed values.
The modules that apply a configuration trust it. The architectures' defaults for these
flags are in :mod:`fairseq_shared.models.architectures`.
"""

import argparse
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

from fairseq_shared.san.flags import SANConfig, add_san_args, san_config_from_args
from fairseq_shared.san.policy import is_trivial
from fairseq_shared.sharing.assignment import SharingConfigError
from fairseq_shared.sharing.flags import STACKS, StackSharing, add_sharing_args, sharing_plan


def add_args(parser) -> None:
    """Every flag of the shared model, on top of fairseq's Transformer flags."""
    add_sharing_args(parser)
    add_san_args(parser)


def flag_actions(add_flags: Callable = add_args) -> List[argparse.Action]:
    """The argparse definitions of every flag that ``add_flags`` declares."""
    parser = argparse.ArgumentParser(add_help=False)
    add_flags(parser)
    return list(parser._actions)


def flag_names() -> List[str]:
    """The destinations of the shared model's own flags (``encoder_share_strategy``, ...)."""
    return [action.dest for action in flag_actions()]


@dataclass(frozen=True)
class ModelConfig:
    """A validated configuration: the sharing plan of each stack and the SAN policies."""

    sharing: Dict[str, StackSharing]
    san: SANConfig


def model_config(args, stacks: Sequence[str] = STACKS, san: bool = True) -> ModelConfig:
    """Validate every sharing and SAN flag of ``args`` (once, before anything is built).

    ``stacks``: the model's stacks; ``san``: whether it takes the SAN flags (the decoder-only
    language model: ``stacks=("decoder",), san=False``)."""
    plan = sharing_plan(args, stacks)
    policies = san_config_from_args(args) if san else SANConfig()
    _refuse_pruned_san(plan, policies)
    return ModelConfig(plan, policies)


def _refuse_pruned_san(plan: Dict[str, StackSharing], san: SANConfig) -> None:
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
