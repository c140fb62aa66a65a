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

from fairseq_shared.errors import FairseqSharedError
from fairseq_shared.san.flags import SANConfig, add_san_args, san_config_from_args
from fairseq_shared.san.policy import is_trivial
from fairseq_shared.sharing.assignment import SharingConfigError
from fairseq_shared.sharing.flags import STACKS, StackSharing, add_sharing_args, sharing_plan


def add_args(parser) -> None:
    """Every flag of the shared model, on top of fairseq's Transformer flags (whose
    ``--{stack}-layers-to-keep`` it types with :func:`layer_list`)."""
    add_sharing_args(parser)
    add_san_args(parser)
    for action in parser._actions:
        if action.dest in {f"{stack}_layers_to_keep" for stack in STACKS}:
            action.type = layer_list


def layer_list(text: str) -> str:
    """``--{stack}-layers-to-keep``: comma-separated layer indices (``0,2,4``) as the string
    fairseq's ``build_model`` splits (fairseq's own type, ``ast.literal_eval``, made ``0,2`` a
    list it cannot split and ``,`` a SyntaxError)."""
    parts = [part.strip() for part in str(text).strip().strip("[]()").split(",")]
    if not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a comma-separated list of layer indices; allowed: indices "
            "from 0 such as 0,2,4")
    return ",".join(str(int(part)) for part in parts)


def layers_to_keep_as_string(args, stacks: Sequence[str] = STACKS) -> None:
    """Write each ``{stack}_layers_to_keep`` of ``args`` back as the string fairseq expects: a
    list or an int comes from ``--model-overrides "{'encoder_layers_to_keep': 3}"``, which
    fairseq's own parser never sees."""
    for stack in stacks:
        name = f"{stack}_layers_to_keep"
        value = getattr(args, name, None)
        if value is None or value == "":
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        try:
            setattr(args, name, layer_list(value))
        except argparse.ArgumentTypeError as error:
            raise SharingConfigError(f"--{stack}-layers-to-keep: {error}") from None


# the model kind of a registered model -> (the task it runs under, the command that runs it)
MODEL_KINDS = {
    "translation model": ("translation", "fairseq-generate (or fairseq-interactive)"),
    "language model": ("language_modeling", "fairseq-eval-lm"),
}


def check_task(kind: str, task) -> None:
    """Refuse a ``kind`` of model (:data:`MODEL_KINDS`) under a task of the other kind, in one
    line naming the task, the model's kind and the command that runs it (before, a language
    model under fairseq-generate was a size mismatch deep in fairseq, and a translation
    model under fairseq-eval-lm an AttributeError)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    is_lm_task = isinstance(task, LanguageModelingTask)
    if is_lm_task == (kind == "language model"):
        return
    task_name = "language_modeling" if is_lm_task else (
        getattr(getattr(task, "cfg", None), "_name", None) or type(task).__name__)
    raise FairseqSharedError(
        f"this checkpoint is a {kind} and the task is {task_name}; a {kind} runs under "
        f"--task {MODEL_KINDS[kind][0]}: use {MODEL_KINDS[kind][1]}")


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
    layers_to_keep_as_string(args, stacks)
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
