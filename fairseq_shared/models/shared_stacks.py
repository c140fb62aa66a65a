"""Cross-layer parameter sharing for any fairseq model whose stacks have ``.layers``.

:class:`SharedStacksMixin` ties the layers of each stack named in a sharing plan
(:class:`~fairseq_shared.models.config.StackSharing`: the encoder and decoder of
:class:`~fairseq_shared.models.shared_transformer.SharedTransformerModel`, the decoder of
:class:`~fairseq_shared.models.shared_lm.SharedTransformerLanguageModel`) and makes its
checkpoints store each tied tensor once.

A state dict also records each stack's layer-to-set map and scope
(``{stack}.sharing_map_version``, ``{stack}.sharing_scope_version``), so that loading a state
saved under another sharing configuration (``--restore-file``, ``--finetune-from-model``,
``--model-overrides``) either reproduces the saved model exactly or stops with an error naming
both configurations. LayerDrop pruning (``--{stack}-layers-to-keep``) keeps each kept
position's set.
"""

import contextlib
import logging
from typing import Dict, List, Optional, Tuple

import torch

from fairseq_shared.models.config import STACKS, StackSharing
from fairseq_shared.modules.tying import tie_layers, unique_parameter_count
from fairseq_shared.sharing import SCOPES, SharingMismatchError, describe, format_assignment, in_scope

logger = logging.getLogger(__name__)


class SharedStacksMixin:
    """Put first in the bases (``class M(SharedStacksMixin, FairseqModel)``); call
    :meth:`apply_sharing` once the model is built."""

    tied_aliases: Dict[str, str]
    sharing: Dict[str, StackSharing]

    def apply_sharing(self, plan: Dict[str, StackSharing]) -> None:
        if not hasattr(self, "sharing"):  # the first call: nothing tied yet
            self.tied_aliases, self.sharing = {}, {}
        for stack, sharing in plan.items():
            layers = getattr(self, stack).layers
            aliases = tie_layers(layers, sharing.assignment, sharing.scope)
            self.tied_aliases.update(
                {f"{stack}.layers.{a}": f"{stack}.layers.{o}" for a, o in aliases.items()}
            )
            self.sharing[stack] = sharing
            logger.info(
                f"{stack}: {len(sharing.assignment)} layers over {sharing.num_sets} parameter "
                f"sets, scope={sharing.scope}, layer->set: {format_assignment(sharing.assignment)}"
            )
        logger.info(f"unique parameters: {unique_parameter_count(self):,}")

    # ---- checkpoints: store each tied tensor once, with the map it was saved under -----
    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        state = super().state_dict(
            *args, destination=destination, prefix=prefix, keep_vars=keep_vars
        )
        for alias in self.tied_aliases:
            state.pop(prefix + alias, None)
        for stack, sharing in self.sharing.items():
            state.update(sharing_markers(sharing, prefix))
        return state

    def full_state_dict(self) -> Dict[str, torch.Tensor]:
        """Every parameter under every name (tied names share one tensor), no markers:
        the state dict of the equivalent unshared fairseq model."""
        return super().state_dict()

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        state = dict(state_dict)
        expected = set(self.full_state_dict())
        saved = {}
        for stack, sharing in self.sharing.items():
            state, saved[stack] = to_model_layout(state, sharing, expected, warn=strict)
        configs = {
            stack: f"the {stack} was saved as {describe(*saved[stack])} and this model's "
            f"{stack} is {sharing.describe()}{_pruned_note(sharing)}"
            for stack, sharing in self.sharing.items()
        }
        state = expand_tied_state(state, self.tied_aliases, configs)
        # to_model_layout already applied LayerDrop pruning: fairseq must not prune again;
        # it clears *_layers_to_keep after pruning, which we do in its place
        _clear_layers_to_keep(model_cfg if model_cfg is not None else args)
        return super().load_state_dict(state, strict=strict, model_cfg=None, args=None)


# "version" in the names: fairseq's EMA (--ema-*, --store-ema) averages every state-dict
# entry except those whose key contains "version" (as encoder.version); these must not move.
MARKER_MAP, MARKER_SCOPE = "sharing_map_version", "sharing_scope_version"


def sharing_markers(sharing: StackSharing, prefix: str = "") -> Dict[str, torch.Tensor]:
    """The two small tensors a state dict carries per stack: set of each layer, scope."""
    return {
        f"{prefix}{sharing.stack}.{MARKER_MAP}": torch.tensor(sharing.assignment),
        f"{prefix}{sharing.stack}.{MARKER_SCOPE}": torch.tensor(SCOPES.index(sharing.scope)),
    }


def pop_markers(state: Dict, stack: str) -> Optional[Tuple[List[int], str]]:
    """``(assignment, scope)`` recorded in ``state`` for ``stack`` (removed), or None."""
    assignment = state.pop(f"{stack}.{MARKER_MAP}", None)
    scope = state.pop(f"{stack}.{MARKER_SCOPE}", None)
    if assignment is None:
        return None
    return [int(s) for s in assignment.tolist()], SCOPES[int(scope)]


def _split_layers(state: Dict, prefix: str):
    """``state`` -> (``{layer index: {name: tensor}}`` for keys under ``prefix``, the rest)."""
    layers: Dict[int, Dict[str, torch.Tensor]] = {}
    rest = {}
    for key, value in state.items():
        index, _, name = key[len(prefix):].partition(".")
        if key.startswith(prefix) and index.isdigit() and name:
            layers.setdefault(int(index), {})[name] = value
        else:
            rest[key] = value
    return layers, rest


def to_model_layout(state: Dict, sharing: StackSharing, expected=None, warn: bool = True):
    """Re-express one stack's layer keys of ``state`` in the layout of ``sharing``.

    Returns ``(state, (saved assignment, saved scope))``. The state's own map (its markers;
    a state without them is taken to be saved under this configuration, with a warning) says
    where each saved layer's tied tensors are stored. Every layer of the model gets the
    tensors of the saved layer at its position (the kept position under LayerDrop pruning):
    what the saved model computed there. ``expected`` (the model's full keys) limits the
    names filled in from a set's stored tensors to those the model's layer has (SAN
    followers have no Q/K). Whether the model's own ties agree with those values is checked
    by :func:`expand_tied_state`. ``warn=False`` (non-strict, partial loads such as fairseq's
    EMA updates) skips the warning about a state without markers.
    """
    stack = sharing.stack
    source = pop_markers(state, stack)
    full = sharing.full_assignment or sharing.assignment
    positions = list(sharing.kept) if sharing.kept is not None else list(range(len(full)))
    if source is None and warn:
        logger.warning(
            f"{stack}: the state dict records no sharing map (saved before fairseq-shared "
            f"recorded one); loading it as saved under this model's {describe(full, sharing.scope)}"
        )
    if source is None:
        source = (full, sharing.scope)
    saved, saved_scope = source
    if len(saved) == len(sharing.assignment):  # saved at this depth (already pruned, or none)
        positions = list(range(len(saved)))
    elif len(saved) != len(full):
        raise SharingMismatchError(
            f"cannot load {stack} parameters saved as {describe(saved, saved_scope)} "
            f"({len(saved)} layers) into this model's {stack}, {sharing.describe()} "
            f"({len(sharing.assignment)} layers{_pruned_note(sharing)})"
        )
    prefix = f"{stack}.layers."
    layers, out = _split_layers(state, prefix)
    for target, position in enumerate(positions):
        own = dict(layers.get(position, {}))
        for other, names in sorted(layers.items()):  # what its saved set stores elsewhere
            if other == position or other >= len(saved) or saved[other] != saved[position]:
                continue
            for name, value in names.items():
                key = f"{prefix}{target}.{name}"
                if name not in own and in_scope(name, saved_scope) and (
                    expected is None or key in expected
                ):
                    own[name] = value
        out.update({f"{prefix}{target}.{name}": value for name, value in own.items()})
    return out, source


def _pruned_note(sharing: StackSharing) -> str:
    if sharing.kept is None:
        return ""
    return (
        f", layers {','.join(map(str, sharing.kept))} kept of "
        f"{describe(sharing.full_assignment, sharing.scope)}"
    )


def _clear_layers_to_keep(model_cfg) -> None:
    if model_cfg is None:
        return
    from omegaconf import DictConfig, open_dict

    is_dict = isinstance(model_cfg, DictConfig)
    context = open_dict(model_cfg) if is_dict else contextlib.nullcontext()
    with context:
        for stack in STACKS:
            if getattr(model_cfg, f"{stack}_layers_to_keep", None):
                setattr(model_cfg, f"{stack}_layers_to_keep", None)


def expand_tied_state(
    state_dict, aliases: Dict[str, str], configs: Optional[Dict[str, str]] = None
):
    """Add alias keys that point at their owner's tensor, so strict loading finds them.

    A state dict that already holds an alias with a value different from its owner's
    (for example a checkpoint of a differently tied model) is refused: loading it would
    silently keep only one of the two values. ``configs`` (per stack) describes the saved
    and the model's configuration for the message.
    """
    expanded = dict(state_dict)
    for alias, owner in aliases.items():
        if owner not in expanded:
            continue
        if alias in expanded and not torch.equal(expanded[alias], expanded[owner]):
            stack = alias.split(".", 1)[0]
            context = (configs or {}).get(stack) or (
                "it was not written by a model with this sharing configuration"
            )
            raise SharingMismatchError(
                f"checkpoint holds different values for tied parameters '{alias}' and "
                f"'{owner}': {context}. The checkpoint cannot be loaded into this model "
                "without changing what it computes; load it into a model with its own "
                "sharing flags, or one that ties less"
            )
        expanded[alias] = expanded[owner]
    return expanded
