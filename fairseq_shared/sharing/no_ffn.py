"""A Transformer layer without its feed-forward sub-layer (``--{stack}-no-ffn``).

Pires et al. 2023 ("One Wide Feedforward is All You Need") drop the decoder's FFNs. fairseq's
encoder and decoder layers compute the FFN sub-layer inline in ``forward``:
``residual + dropout(fc2(act(fc1(LN(x)))))`` (pre-LN) or ``LN(residual + ...)`` (post-LN).
:func:`drop_ffn` keeps fairseq's ``forward`` and swaps the sub-layer's modules for
parameter-free ones, as the SAN followers swap their attention (:mod:`fairseq_shared.san`):
``fc1`` hands on no features (an empty view), ``fc2`` returns zeros of the model's width, the
sub-layer's LayerNorm (``final_layer_norm``) becomes the identity, and the decoder's NormFormer
extras of that sub-layer (``ffn_layernorm``, ``w_resid``) are gone. The sub-layer then adds an
exact zero to its residual: the layer is its attention sub-layer(s) only, in both norm orders.
Its state dict has no ``fc1``/``fc2``/``final_layer_norm`` entries.
"""

from typing import List

import torch
import torch.nn as nn

#: The layer's sub-modules that hold the FFN sub-layer (its state-dict prefixes).
FFN_MODULES = ("fc1", "fc2", "final_layer_norm")


class NoFeatures(nn.Module):
    """In place of ``fc1``: no hidden features (an empty view of the input, no copy)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., :0]


class ZeroUpdate(nn.Module):
    """In place of ``fc2``: the sub-layer's output, zeros of the model's width."""

    def __init__(self, embed_dim: int):
        super().__init__()
        self.embed_dim = embed_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape: List[int] = list(x.size()[:-1])
        return x.new_zeros(shape + [self.embed_dim])


def drop_ffn(layer: nn.Module) -> None:
    """Remove the FFN sub-layer of one fairseq encoder or decoder layer (idempotent)."""
    layer.fc1 = NoFeatures()
    layer.fc2 = ZeroUpdate(layer.embed_dim)
    layer.final_layer_norm = nn.Identity()

