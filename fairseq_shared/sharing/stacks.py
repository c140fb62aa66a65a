"""Cross-layer parameter sharing for any fairseq model whose stacks have ``.layers``.

:class:`SharedStacksMixin` ties the layers of each stack named in a sharing plan
(:class:`~fairseq_shared.sharing.flags.StackSharing`: the encoder and decoder of
:class:`~fairseq_shared.models.shared_transformer.SharedTransformerModel`, the decoder of
:class:`~fairseq_shared.models.shared_lm.SharedTransformerLanguageModel`) and makes its
checkpoints store each tied tensor once.

Relaxed sharing (``--{stack}-share-lora-rank``, ``--{stack}-untie-norms``,
``--{stack}-untie-biases``; :mod:`fairseq_shared.sharing.lora`) is applied here too, after the
ties: any model that uses the mixin gets it.

A state dict also records each stack's layer-to-set map and scope
(``{stack}.sharing_map_version``, ``{stack}.sharing_scope_version``) and, when sharing is
relaxed, ``{stack}.sharing_relaxation_version`` = ``[R, untie_norms, untie_biases]`` (absent:
rigid), and, when its layers have no FFN (``--{stack}-no-ffn``, applied here before the
ties: :mod:`fairseq_shared.sharing.no_ffn`), ``{stack}.sharing_no_ffn_version``, so that
loading a state saved under another sharing configuration (``--restore-file``,
``--finetune-from-model``, ``--model-overrides``) either reproduces the saved model exactly or
stops with an error naming both configurations. LayerDrop pruning (``--{stack}-layers-to-keep``)
keeps each kept position's set and delta.
"""

import contextlib
import dataclasses
import logging
from typing import Callable, Dict, Mapping, Optional, Set

import torch

from fairseq_shared.sharing.assignment import (
    SCOPES,
    SharingMismatchError,
    describe,
    format_assignment,
    in_scope,
)
from fairseq_shared.sharing.flags import STACKS, StackSharing, describe_relaxation
from fairseq_shared.sharing.lora import (
    add_low_rank_deltas,
    is_delta,
    logical_name,
    merged_state,
    position_state,
)
from fairseq_shared.sharing.no_ffn import FFN_MODULES, drop_ffn
from fairseq_shared.sharing.tying import (
    LINEAR_BIAS,
    NORM,
    parameter_kind,
    tie_layers,
    unique_parameter_count,
)

logger = logging.getLogger(__name__)


class SharedStacksMixin:
    """Put first in the bases (``class M(SharedStacksMixin, FairseqModel)``); call
    :meth:`apply_sharing` once the model is built."""

    tied_aliases: Dict[str, str]
    sharing: Dict[str, StackSharing]
    # checkpoint bookkeeping that no forward pass reads: TorchScript must not compile the
    # annotations above (it cannot script the StackSharing dataclass)
    __jit_ignored_attributes__ = ["tied_aliases", "sharing"]

    def apply_sharing(self, plan: Dict[str, StackSharing]) -> None:
        if not hasattr(self, "sharing"):  # the first call: nothing tied yet
            self.tied_aliases, self.sharing = {}, {}
        for stack, sharing in plan.items():
            layers = getattr(self, stack).layers
            if sharing.no_ffn:
                for layer in layers:
                    drop_ffn(layer)
            aliases = tie_layers(layers, sharing.assignment, sharing.scope, untied_kinds(sharing))
            if sharing.lora_rank:
                aliases = add_low_rank_deltas(layers, aliases, sharing.lora_rank)
            self.tied_aliases.update(
                {f"{stack}.layers.{a}": f"{stack}.layers.{o}" for a, o in aliases.items()}
            )
            self.sharing[stack] = sharing
            logger.info(
                f"{stack}: {len(sharing.assignment)} layers over {sharing.num_sets} parameter "
                f"sets, scope={sharing.scope}, layer->set: {format_assignment(sharing.assignment)}"
                + describe_relaxation(sharing.lora_rank, sharing.untie_norms, sharing.untie_biases)
                + (", no FFN" if sharing.no_ffn else "")
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
        """Every parameter under every name (tied names share one tensor; each relaxed
        weight merged, ``W_set + B A``, under its plain name), no markers: the state dict of
        the equivalent unshared fairseq model."""
        return merged_state(super().state_dict())

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        state = dict(state_dict)
        current = super().state_dict()  # every name, as the modules hold them
        saved = {}
        for stack, sharing in self.sharing.items():
            kinds = parameter_kinds(getattr(self, stack).layers)
            state, saved[stack] = to_model_layout(state, sharing, current, strict, kinds)
        configs = {
            stack: f"the {stack} was saved as {saved[stack].describe()} and this model's "
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
MARKER_RELAXATION = "sharing_relaxation_version"  # [R, untie_norms, untie_biases]; absent: rigid
MARKER_NO_FFN = "sharing_no_ffn_version"  # present (1) when the layers have no FFN


def sharing_markers(sharing: StackSharing, prefix: str = "") -> Dict[str, torch.Tensor]:
    """The small tensors a state dict carries per stack: set of each layer, scope, and the
    relaxation when there is one."""
    markers = {
        f"{prefix}{sharing.stack}.{MARKER_MAP}": torch.tensor(sharing.assignment),
        f"{prefix}{sharing.stack}.{MARKER_SCOPE}": torch.tensor(SCOPES.index(sharing.scope)),
    }
    if sharing.relaxed:
        markers[f"{prefix}{sharing.stack}.{MARKER_RELAXATION}"] = torch.tensor(
            [sharing.lora_rank, int(sharing.untie_norms), int(sharing.untie_biases)]
        )
    if sharing.no_ffn:
        markers[f"{prefix}{sharing.stack}.{MARKER_NO_FFN}"] = torch.tensor(1)
    return markers


def pop_markers(state: Dict, stack: str) -> Optional[StackSharing]:
    """The configuration recorded in ``state`` for ``stack`` (markers removed), or None."""
    assignment = state.pop(f"{stack}.{MARKER_MAP}", None)
    scope = state.pop(f"{stack}.{MARKER_SCOPE}", None)
    relaxation = state.pop(f"{stack}.{MARKER_RELAXATION}", None)
    no_ffn = state.pop(f"{stack}.{MARKER_NO_FFN}", None)
    if assignment is None:
        return None
    rank, untie_norms, untie_biases = relaxation.tolist() if relaxation is not None else (0, 0, 0)
    return StackSharing(
        stack, [int(s) for s in assignment.tolist()], SCOPES[int(scope)],
        lora_rank=int(rank), untie_norms=bool(untie_norms), untie_biases=bool(untie_biases),
        no_ffn=no_ffn is not None and bool(no_ffn),
    )


def untied_kinds(sharing: StackSharing) -> Set[str]:
    """The kinds of parameters (:mod:`~fairseq_shared.sharing.tying`) kept per position."""
    kinds = ((NORM, sharing.untie_norms), (LINEAR_BIAS, sharing.untie_biases))
    return {kind for kind, on in kinds if on}


def parameter_kinds(layers) -> Dict[str, str]:
    """``{layer-relative name: kind}`` over the parameters of ``layers``."""
    return {
        name: parameter_kind(layer, name)
        for layer in layers for name, _ in layer.named_parameters(remove_duplicate=False)
    }


def _tied_in(source: StackSharing, kinds: Mapping[str, str]) -> Callable[[str], bool]:
    """Whether ``source`` ties the (layer-relative) state-dict name across a set."""
    untie = untied_kinds(source)
    return lambda name: not is_delta(name) and in_scope(logical_name(name), source.scope) and (
        kinds.get(name) not in untie
    )


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


def to_model_layout(
    state: Dict,
    sharing: StackSharing,
    expected: Optional[Mapping[str, torch.Tensor]] = None,
    warn: bool = True,
    kinds: Optional[Mapping[str, str]] = None,
):
    """Re-express one stack's layer keys of ``state`` in the layout of ``sharing``.

    Returns ``(state, saved)``, ``saved`` the :class:`StackSharing` the state records (its
    markers; a state without them is taken to be saved under this configuration, with a
    warning), which says where each saved layer's tied tensors are stored. Every layer of
    the model gets the tensors of the saved layer at its position (the kept position under
    LayerDrop pruning): what the saved model computed there, in the model's layout
    (:func:`~fairseq_shared.sharing.lora.position_state`: relaxed weights merged, or split
    into ``W_set`` and a zero delta, where the two layouts differ). ``expected`` (the model's
    full state, every name) gives that layout, limits the names filled in from a set's stored
    tensors to those the model's layer has (SAN followers have no Q/K) and gives the model's
    own ``A`` of a zero delta; ``kinds`` (:func:`parameter_kinds`) tells which names the
    saved relaxation kept per position. Whether the model's own ties agree with the values
    is checked by :func:`expand_tied_state`. ``warn=False`` (non-strict, partial loads such
    as fairseq's EMA updates) skips the warning about a state without markers.
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
    prefix = f"{stack}.layers."
    layers, out = _split_layers(state, prefix)
    if source is None:  # whether it has FFNs, from its keys (a partial load: as the model)
        saved_ffn = any(n.startswith(FFN_MODULES) for names in layers.values() for n in names)
        source = dataclasses.replace(sharing, assignment=full, full_assignment=None, kept=None,
                                     no_ffn=not saved_ffn if layers and warn else sharing.no_ffn)
    if source.no_ffn != sharing.no_ffn:
        raise SharingMismatchError(
            f"cannot load {stack} parameters saved as {source.describe()} into this model's "
            f"{stack}, {sharing.describe()}: "
            + ("the saved layers have no FFN weights for this model's FFNs"
               if source.no_ffn else "this model's layers have no FFN for the saved FFN weights")
            + f"; load it into a model with{'' if source.no_ffn else 'out'} --{stack}-no-ffn"
        )
    saved = source.assignment
    if len(saved) == len(sharing.assignment):  # saved at this depth (already pruned, or none)
        positions = list(range(len(saved)))
    elif len(saved) != len(full):
        raise SharingMismatchError(
            f"cannot load {stack} parameters saved as {source.describe()} "
            f"({len(saved)} layers) into this model's {stack}, {sharing.describe()} "
            f"({len(sharing.assignment)} layers{_pruned_note(sharing)})"
        )
    tied = _tied_in(source, kinds or {})
    for target, position in enumerate(positions):
        own = layers.get(position, {})
        layer = dict(own)
        for other, names in sorted(layers.items()):  # what its saved set stores elsewhere
            if other == position or other >= len(saved) or saved[other] != saved[position]:
                continue
            layer.update({n: v for n, v in names.items() if n not in layer and tied(n)})
        if expected is not None:
            model_prefix = f"{prefix}{target}."
            model_layer = {
                k[len(model_prefix):]: v for k, v in expected.items() if k.startswith(model_prefix)
            }
            layer = position_state(layer, own, model_layer)
        out.update({f"{prefix}{target}.{name}": value for name, value in layer.items()})
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
