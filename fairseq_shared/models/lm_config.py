"""The language model's configuration: fairseq's ``TransformerLanguageModelConfig`` plus the
decoder's sharing flags, derived from :mod:`fairseq_shared.models.config`.

fairseq's language model is configured by a dataclass: ``fairseq-train`` adds its flags from
the dataclass's fields and, when it converts the parsed ``argparse.Namespace`` to omegaconf,
keeps only those fields. A flag that only an ``add_args`` declared would be parsed and then
silently dropped before the model is built. So the dataclass carries every ``--decoder-*``
flag that :func:`fairseq_shared.models.config.add_args` declares, read from those argparse
definitions (name, type, default, help, choices): a flag declared there once, for any stack,
reaches the language model with no further wiring. Validation stays where it is
(:class:`~fairseq_shared.sharing.flags.StackSharing`), with the same errors.
"""

import argparse
import dataclasses
from typing import Any, Callable, List, Optional, Tuple, Type

from fairseq.dataclass import ChoiceEnum
from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from fairseq_shared.models import config

STACK = "decoder"  # a decoder-only language model has this one stack
_FLAG_TYPES = (int, float, str)


def stack_flags(stack: str = STACK, add_flags: Callable = config.add_args) -> List[argparse.Action]:
    """The argparse definitions of every ``--{stack}-*`` flag that ``add_flags`` declares."""
    return [a for a in config.flag_actions(add_flags) if a.dest.startswith(f"{stack}_")]


def dataclass_field(action: argparse.Action) -> Tuple[str, Any, dataclasses.Field]:
    """One argparse flag as a fairseq dataclass field with its name, type, default and help
    (fairseq turns the field back into the same flag: a bool into ``store_true``, choices
    into an enum whose bad values argparse refuses with the allowed ones)."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        kind = bool
    elif type(action) is argparse._StoreAction and action.choices and all(
            isinstance(c, str) for c in action.choices):
        kind = Optional[ChoiceEnum(list(action.choices))]
    elif type(action) is argparse._StoreAction and not action.choices and (
            action.type or str) in _FLAG_TYPES:
        kind = Optional[action.type or str]
    else:
        flag = action.option_strings[0] if action.option_strings else action.dest
        raise TypeError(
            f"{flag}: a model flag the language model takes must be a plain value "
            "(type int, float or str; choices only as strings) or store_true/store_false; "
            f"got {type(action).__name__} with type {action.type}"
        )
    field = dataclasses.field(default=action.default, metadata={"help": action.help})
    return action.dest, kind, field


def config_with_stack_flags(
    base: Type = TransformerLanguageModelConfig,
    stack: str = STACK,
    add_flags: Callable = config.add_args,
    name: str = "SharedTransformerLanguageModelConfig",
) -> Type:
    """``base`` (a fairseq dataclass) extended with the ``--{stack}-*`` flags of ``add_flags``."""
    fields = [dataclass_field(a) for a in stack_flags(stack, add_flags)]
    clash = {n for n, _, _ in fields} & {f.name for f in dataclasses.fields(base)}
    if clash:
        raise ValueError(f"{base.__name__} already has the fields {sorted(clash)}")
    derived = dataclasses.make_dataclass(name, fields, bases=(base,))
    derived.__module__ = __name__
    return derived


SharedTransformerLanguageModelConfig = config_with_stack_flags()
