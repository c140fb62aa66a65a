"""Change the SAN policy of a trained model or checkpoint (the library side of
``python -m fairseq_shared.cli.convert_policy``).

Layers whose role does not change keep their weights. When a follower becomes a leader
it needs the parameters it did not have; it gets, in this order:

1. the same-named parameter of another layer of its parameter-sharing set, if the old
   model has it there (tied layers must agree), else
2. the same-named parameter of its old block leader (whose attention it has been using,
   so its first forward pass starts from the leader's attention function).

Leaders that become followers simply drop Q/K (self) or Q/K/V[/out] (encoder-decoder).
The optimizer state (and an EMA copy) no longer matches the parameters: it is removed, so
training resumes with ``--reset-optimizer``. The checkpoint is opened and rewritten by the
tools' one helper (:mod:`fairseq_shared.tools.checkpoints`: the configuration by its one
rule); only fairseq-shared's translation model has policies to change.
"""

import copy
import logging
import re
from typing import Dict

import torch
import torch.nn as nn

from fairseq_shared import checkpoint_io
from fairseq_shared.models.architectures import MODEL
from fairseq_shared.san.policy import format_policy, leaders
from fairseq_shared.sharing.lora import logical_name, position_state
from fairseq_shared.tools.checkpoints import Takes, open_checkpoint, rebuilt

logger = logging.getLogger("fairseq_shared.convert_policy")

TOOL = "convert_policy"
TAKES = Takes("change the SAN policy of", (MODEL,))
_LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)$")


def _full_state(model: nn.Module) -> Dict[str, torch.Tensor]:
    """Every name, tied aliases included (nn.Module's state_dict, not the de-duplicated one)."""
    return dict(nn.Module.state_dict(model))


def _layer_state(state: Dict[str, torch.Tensor], stack: str, index: int) -> Dict[str, torch.Tensor]:
    prefix = f"{stack}.layers.{index}."
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def _old_leader(model, stack: str, sub: str, index: int) -> int:
    if stack == "decoder":
        policy = model.decoder.san_self_policy if sub == "self" else model.decoder.san_cross_policy
    else:
        policy = model.encoder.san_policy
    if policy is None:
        return index
    return leaders(policy)[index]


def _sets(model, stack: str, num_layers: int):
    sharing = getattr(model, "sharing", {}).get(stack)
    return list(sharing.assignment) if sharing is not None else list(range(num_layers))


def _sources(old_model, new_model, stack: str, index: int, name: str):
    """The old layers a parameter the old layer ``index`` lacks is started from, in order."""
    n = len(getattr(old_model, stack).layers)
    sets = _sets(new_model, stack, n)
    sub = "cross" if name.startswith("encoder_attn") else "self"
    same_set = [j for j in range(n) if sets[j] == sets[index] and j != index]
    return same_set + [_old_leader(old_model, stack, sub, index)]


def _convert_layer(old, old_model, new_model, stack: str, index: int, target):
    """The new layer ``index``'s tensors, each in the new layout (plain or relaxed:
    :func:`~fairseq_shared.sharing.lora.position_state`) from the old layer itself or,
    for what it did not have, from the first of :func:`_sources` that has it."""
    out = position_state(_layer_state(old, stack, index), (), target)
    in_layout = {}  # each source layer re-expressed once, however many names it starts
    for name in target:
        if name in out:
            continue
        for j in _sources(old_model, new_model, stack, index, logical_name(name)):
            if j not in in_layout:
                in_layout[j] = position_state(_layer_state(old, stack, j), (), target)
            found = in_layout[j]
            if name in found:
                out[name] = found[name].clone()
                break
        else:
            raise KeyError(f"{stack}.layers.{index}.{name}: no layer of the old model holds "
                           f"'{logical_name(name)}' to start it from")
    return out


def convert_model(old_model: nn.Module, new_model: nn.Module) -> nn.Module:
    """Load ``old_model``'s weights into ``new_model`` (built with another SAN policy)."""
    old, new = _full_state(old_model), _full_state(new_model)
    state: Dict[str, torch.Tensor] = {}
    for key in new:
        if _LAYER.match(key) is None:
            if key not in old:
                raise KeyError(f"{key}: not in the old model and not a layer parameter")
            state[key] = old[key]
    for stack in ("encoder", "decoder"):
        for index in range(len(getattr(new_model, stack).layers)):
            target = _layer_state(new, stack, index)
            layer = _convert_layer(old, old_model, new_model, stack, index, target)
            state.update({f"{stack}.layers.{index}.{k}": v for k, v in layer.items()})
    # tied aliases follow their owner; the sharing markers say the state is in the new layout
    for alias in getattr(new_model, "tied_aliases", {}):
        state.pop(alias, None)
    state.update({k: v for k, v in new_model.state_dict().items() if k not in new})
    new_model.load_state_dict(state, strict=True)
    return new_model


def convert_checkpoint(path_in: str, path_out: str, self_policy=None, cross_policy=None,
                       cross_reuse=None, encoder_policy=None, data=None) -> Dict[str, str]:
    checkpoint_io.refuse_overwrite([path_in], [path_out])
    loaded = open_checkpoint(path_in, TOOL, TAKES, data=data)
    new_args = copy.deepcopy(loaded.cfg.model)
    changes = {
        "san_self_policy": self_policy,
        "san_cross_policy": cross_policy,
        "san_cross_reuse": cross_reuse,
        "san_encoder_policy": encoder_policy,
    }
    for name, value in changes.items():
        if value is not None:
            if isinstance(value, (list, tuple)):
                value = format_policy(value)
            setattr(new_args, name, value)
    new_model = loaded.task.build_model(new_args)
    convert_model(loaded.model, new_model)
    checkpoint_io.save(rebuilt(loaded, new_model, new_args), path_out)
    summary = {name: getattr(new_args, name, None) for name in changes}
    logger.info(f"wrote {path_out}: {summary}")
    return summary
