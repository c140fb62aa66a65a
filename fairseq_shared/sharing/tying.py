"""Tie parameters across the layers of a stack.

Every layer stays its own module (and so keeps its own attention objects and their
incremental-decoding caches); only Parameter leaves are rebound. Each parameter is tied
to the *same-named* parameter of the first layer of its set that has that name.
"""

from typing import Collection, Dict, Sequence

import torch
import torch.nn as nn

from fairseq_shared.sharing.assignment import in_scope

#: Kinds of layer parameters that relaxed sharing can keep per position (``untie``).
NORM, LINEAR_BIAS = "norm", "linear_bias"


def _set_parameter(module: nn.Module, dotted_name: str, param: nn.Parameter) -> None:
    owner_path, _, leaf = dotted_name.rpartition(".")
    owner = module.get_submodule(owner_path) if owner_path else module
    setattr(owner, leaf, param)


def parameter_kind(layer: nn.Module, name: str) -> str:
    """:data:`NORM` (a LayerNorm's), :data:`LINEAR_BIAS` (an ``nn.Linear``'s bias) or
    ``"other"``, for the parameter ``name`` of ``layer``."""
    owner_path, _, leaf = name.rpartition(".")
    owner = layer.get_submodule(owner_path) if owner_path else layer
    if isinstance(owner, nn.LayerNorm) or type(owner).__name__.endswith("LayerNorm"):
        return NORM
    if isinstance(owner, nn.Linear) and leaf == "bias":
        return LINEAR_BIAS
    return "other"


def tie_layers(
    layers: nn.ModuleList, assignment: Sequence[int], scope: str, untie: Collection[str] = ()
) -> Dict[str, str]:
    """Tie ``layers`` according to ``assignment`` (0-based set per layer) and ``scope``;
    parameters of a kind in ``untie`` (:data:`NORM`, :data:`LINEAR_BIAS`) stay per layer,
    starting as copies of the first layer of their set (so the model starts as the tied one).

    Returns ``{alias: owner}`` with names relative to ``layers`` (``"3.fc1.weight" ->
    "0.fc1.weight"``): the alias entries are the duplicates a state dict need not store.
    """
    if len(assignment) != len(layers):
        raise ValueError(f"assignment has {len(assignment)} entries for {len(layers)} layers")
    owners: Dict[tuple, tuple] = {}
    aliases: Dict[str, str] = {}
    for index, layer in enumerate(layers):
        for name, param in list(layer.named_parameters(remove_duplicate=False)):
            if not in_scope(name, scope):
                continue
            key = (assignment[index], name)
            if key not in owners:
                owners[key] = (index, param)
                continue
            owner_index, owner_param = owners[key]
            if owner_param.shape != param.shape:
                raise ValueError(
                    f"cannot tie layer {index} '{name}' {tuple(param.shape)} to layer "
                    f"{owner_index} {tuple(owner_param.shape)}"
                )
            if untie and parameter_kind(layer, name) in untie:
                with torch.no_grad():
                    param.copy_(owner_param)
                continue
            _set_parameter(layer, name, owner_param)
            aliases[f"{index}.{name}"] = f"{owner_index}.{name}"
    return aliases


def unique_parameter_count(module: nn.Module) -> int:
    """Parameters counted once however often they are tied (what fairseq-train logs)."""
    return sum(p.numel() for p in module.parameters())
