"""Tie parameters across the layers of a stack.

Every layer stays its own module (and so keeps its own attention objects and their
incremental-decoding caches); only Parameter leaves are rebound. Each parameter is tied
to the *same-named* parameter of the first layer of its set that has that name.
"""

from typing import Dict, Sequence

import torch.nn as nn

from fairseq_shared.sharing import in_scope


def _set_parameter(module: nn.Module, dotted_name: str, param: nn.Parameter) -> None:
    owner_path, _, leaf = dotted_name.rpartition(".")
    owner = module.get_submodule(owner_path) if owner_path else module
    setattr(owner, leaf, param)


def tie_layers(layers: nn.ModuleList, assignment: Sequence[int], scope: str) -> Dict[str, str]:
    """Tie ``layers`` according to ``assignment`` (0-based set per layer) and ``scope``.

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
            _set_parameter(layer, name, owner_param)
            aliases[f"{index}.{name}"] = f"{owner_index}.{name}"
    return aliases


def unique_parameter_count(module: nn.Module) -> int:
    """Parameters counted once however often they are tied (what fairseq-train logs)."""
    return sum(p.numel() for p in module.parameters())
