"""The relay that carries a block leader's attention to its followers.

One relay per stack, shared by the attention modules of its layers: a leader ``put``s
its tensors, the followers ``get`` them and the block's last follower ``take``s them,
so nothing is held between forward passes.

TorchScript copies a plain dict attribute into every module that holds it, which would
cut the leader off from its followers. ``__prepare_scriptable__`` therefore swaps the
relay for one scripted relay before ``torch.jit.script`` compiles the model; torch calls
it once per relay object (its memo is keyed by object), so all holders keep sharing one
relay. The swap happens in place: after scripting, the eager model uses the scripted
relay too (same results, a few microseconds more per call).
"""

from typing import Dict

import torch
import torch.nn as nn
from torch import Tensor


class ScriptableRelay(nn.Module):
    tensors: Dict[str, Tensor]

    def __init__(self):
        super().__init__()
        self.tensors = {}

    @torch.jit.export
    def put(self, key: str, value: Tensor) -> None:
        self.tensors[key] = value

    @torch.jit.export
    def get(self, key: str) -> Tensor:
        return self.tensors[key]

    @torch.jit.export
    def take(self, key: str) -> Tensor:
        return self.tensors.pop(key)


class Relay(ScriptableRelay):
    def __prepare_scriptable__(self) -> nn.Module:
        return torch.jit.script(ScriptableRelay())
