"""Relaxed sharing: a low-rank delta per position on every tied Linear weight.

Relaxed Recursive Transformers (Bae et al. 2025): a layer at position p whose parameter set
is used by other positions too computes with ``W_p = W_set + B_p A_p`` instead of ``W_set``,
``A_p`` of shape (R, d_in), ``B_p`` of shape (d_out, R), ``B_p = 0`` at the start (a fresh
model is the rigidly tied one). A position alone in its set is not tied and gets no delta.

The delta is a :mod:`torch.nn.utils.parametrize` parametrization of the Linear's ``weight``,
so every reader of ``linear.weight`` sees ``W_set + B A``: the module's forward (incremental
decoding calls it), fairseq's ``MultiheadAttention`` full pass (which hands ``q_proj.weight``
... to ``F.multi_head_attention_forward`` without calling the modules), exports. A forward
hook would reach only the first of these.

Names, relative to a layer (``encoder.layers.3.`` ...), of a relaxed ``fc1``:

* ``fc1.parametrizations.weight.original``: ``W_set``, one tensor for the whole set (a state
  dict stores it once, under the set's first position);
* ``fc1.parametrizations.weight.0.lora_A`` and ``...0.lora_B``: this position's ``A_p``, ``B_p``.

The *logical* name of all three is ``fc1.weight``: :func:`merged_state` turns a state dict
into the plain one whose ``fc1.weight`` is ``W_set + B_p A_p`` (what an unshared model with
the same function stores), and :func:`position_state` re-expresses a saved layer in another
layer's layout, exactly or not at all (see there).
"""

import math
from typing import Collection, Dict, Mapping, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.utils import parametrize

ORIGINAL = "parametrizations.weight.original"
DELTA_A = "parametrizations.weight.0.lora_A"
DELTA_B = "parametrizations.weight.0.lora_B"


def merge(weight: Tensor, lora_A: Tensor, lora_B: Tensor) -> Tensor:
    """``W + B A``: the one expression both the forward pass and the merge compute, so that
    merged weights are the ones the relaxed model uses."""
    return weight + lora_B @ lora_A


class LowRankDelta(nn.Module):
    """The parametrization ``W -> W + B A`` of one position's tied Linear weight."""

    def __init__(self, out_features: int, in_features: int, rank: int):
        super().__init__()
        self.lora_A = nn.Parameter(torch.empty(rank, in_features))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear's weight (and PEFT)

    def forward(self, weight: Tensor) -> Tensor:
        return merge(weight, self.lora_A, self.lora_B)


def _linear_of_weight(layer: nn.Module, name: str):
    """The ``nn.Linear`` whose ``weight`` the layer-relative ``name`` is, or None."""
    module_path, _, leaf = name.rpartition(".")
    module = layer.get_submodule(module_path) if module_path else layer
    return module if leaf == "weight" and isinstance(module, nn.Linear) else None


def add_low_rank_deltas(
    layers: nn.ModuleList, aliases: Mapping[str, str], rank: int
) -> Dict[str, str]:
    """Give every position of every tied Linear weight its own rank-``rank`` delta.

    ``aliases`` is :func:`~fairseq_shared.sharing.tying.tie_layers`'s ``{alias: owner}``
    (names relative to ``layers``): a weight is tied at a position when it is an alias or an
    owner there. Returns the aliases under the names they have now (``"3.fc1.weight"`` ->
    ``"3.fc1.parametrizations.weight.original"``).
    """
    tied = set(aliases) | set(aliases.values())
    renamed = {}
    for index, layer in enumerate(layers):  # in layer order: a reproducible draw of each A
        for name, _ in list(layer.named_parameters(remove_duplicate=False)):
            linear = _linear_of_weight(layer, name) if f"{index}.{name}" in tied else None
            if linear is not None:
                delta = LowRankDelta(linear.out_features, linear.in_features, rank)
                parametrize.register_parametrization(linear, "weight", delta.to(linear.weight))
                renamed[f"{index}.{name}"] = f"{index}.{name[:-len('weight')]}{ORIGINAL}"
    return {renamed.get(a, a): renamed.get(o, o) for a, o in aliases.items()}


def logical_name(name: str) -> str:
    """``fc1.parametrizations.weight.{original,0.lora_A,0.lora_B}`` -> ``fc1.weight``;
    other names are their own logical name."""
    for suffix in (ORIGINAL, DELTA_A, DELTA_B):
        if name.endswith("." + suffix):
            return name[: -len(suffix)] + "weight"
    return name


def is_delta(name: str) -> bool:
    return name.endswith(("." + DELTA_A, "." + DELTA_B))


def delta_parts(state: Mapping[str, Tensor]) -> Dict[str, Tuple[Tensor, Tensor, Tensor]]:
    """``{logical name: (W_set, A, B)}`` of every relaxed weight in ``state``."""
    parts = {}
    for name, value in state.items():
        if name.endswith("." + ORIGINAL):
            base = name[: -len(ORIGINAL)]
            parts[logical_name(name)] = (value, state[base + DELTA_A], state[base + DELTA_B])
    return parts


def merged_state(state: Mapping[str, Tensor]) -> Dict[str, Tensor]:
    """``state`` with each relaxed weight merged, ``W_set + B A``, under its logical name;
    every other entry as it is (tied ones still one tensor)."""
    parts = delta_parts(state)
    merged = {}
    for name, value in state.items():
        if name.endswith("." + ORIGINAL):
            merged[logical_name(name)] = merge(*parts[logical_name(name)]).detach()
        elif not is_delta(name):
            merged[name] = value
    return merged


def position_state(
    saved: Mapping[str, Tensor], own: Collection[str], target: Mapping[str, Tensor]
) -> Dict[str, Tensor]:
    """One saved layer's tensors in the layout of one layer of the model, so that the
    layer computes what the saved layer computed.

    ``saved``: the saved layer (layer-relative names; tied tensors filled in from its set);
    ``own``: the names the saved layer stored itself; ``target``: the model layer's current
    tensors. A plain weight of the model gets the saved layer's merged weight. A relaxed
    weight gets the saved ``W_set``, ``A``, ``B`` when the saved layer relaxed it at the same
    rank; otherwise ``W_set`` = the saved merged weight, ``B = 0`` and the layer's own ``A``
    (the tied copies of ``W_set`` must then agree across the set, which the caller checks:
    refused otherwise). Saved names the model's layer lacks are passed on if the saved layer
    stored them itself, so that strict loading reports them.
    """
    merged, parts = merged_state(saved), delta_parts(saved)
    out: Dict[str, Tensor] = {}
    for name in target:
        weight = logical_name(name)
        if name == weight:
            if name in merged:
                out[name] = merged[name]
            continue
        if not name.endswith(ORIGINAL):  # A and B: set with their W_set
            continue
        base = name[: -len(ORIGINAL)]
        lora_A, lora_B = base + DELTA_A, base + DELTA_B
        if weight in parts and parts[weight][1].shape == target[lora_A].shape:
            out[name], out[lora_A], out[lora_B] = parts[weight]
        elif weight in merged:
            out[name], out[lora_A] = merged[weight], target[lora_A]
            out[lora_B] = torch.zeros_like(target[lora_B])
    known = {logical_name(name) for name in target}
    out.update({name: saved[name] for name in own if logical_name(name) not in known})
    return out


def delta_parameter_count(module: nn.Module) -> int:
    """Parameters of the low-rank deltas in ``module`` (each A and B)."""
    return sum(
        p.numel() for name, p in module.named_parameters() if is_delta(name)
    )
