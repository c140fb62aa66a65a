"""SAN's attention modules. They are swapped into fairseq's own layers (as fairseq's
linformer swaps in its attention), so the layers' and the decoders' forward passes stay
fairseq's; every module here takes ``MultiheadAttention``'s call.

Leader: fairseq's ``MultiheadAttention`` with two taps that publish to the stack's
:class:`~fairseq_shared.san.relay.Relay` what its followers reuse, its maths unchanged:

* :class:`WeightTap` stands in for its attention dropout, whose input is the post-softmax
  weights ``(B*H, T, S)``: it puts them in the relay, then applies the dropout (so each
  follower applies its own). PyTorch's fused path skips that module, so a leader takes
  fairseq's own path (``skip_embed_dim_check``, the switch fairseq uses for pruned heads).
* :class:`ProjectionTap` (encoder-decoder leaders) is its ``out_proj`` with the same
  parameters; it puts its output (``--san-cross-reuse output``) or its input, the
  context before the projection (``context``).

Followers: :class:`FollowerSelfAttention` computes ``out_proj(S_leader V)`` with its own
``v_proj``/``out_proj`` (no Q/K, caches ``prev_value`` only, reordered in beam search by the
inherited ``reorder_incremental_state``); :class:`CrossFollower` returns the leader's
output (or its own ``out_proj`` over the leader's context) and caches nothing. The
block's last follower takes the leader's tensors out of the relay.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor

from fairseq_shared.san.relay import Relay

SELF, CROSS, CROSS_WEIGHTS = "self", "cross", "cross_weights"  # relay keys (TorchScript
# reads no global strings: modules keep the keys they use as attributes)


class WeightTap(nn.Module):
    """A leader's attention dropout that first publishes the weights it is given."""

    def __init__(self, dropout: FairseqDropout, relay: Relay, key: str):
        super().__init__()
        self.dropout = dropout
        self.relay = relay
        self.key = key
        self.p = dropout.p  # read by MultiheadAttention's (skipped) fused path

    def forward(self, x: Tensor, inplace: bool = False) -> Tensor:
        self.relay.put(self.key, x)
        return self.dropout(x, inplace)


class ProjectionTap(nn.Linear):
    """A leader's ``out_proj`` (the same parameters) that publishes its output, or its
    input with ``publish_input``."""

    def __init__(self, linear: nn.Linear, relay: Relay, key: str, publish_input: bool):
        # built on the meta device: no initialisation, no draw from the random generator
        super().__init__(linear.in_features, linear.out_features, linear.bias is not None, device="meta")
        self.weight = linear.weight
        self.bias = linear.bias
        self.relay = relay
        self.key = key
        self.publish_input = publish_input

    def forward(self, input: Tensor) -> Tensor:
        output = F.linear(input, self.weight, self.bias)
        self.relay.put(self.key, input if self.publish_input else output)
        return output


class FollowerSelfAttention(MultiheadAttention):
    """Self-attention of a follower: ``out_proj(S_leader @ v_proj(x))``.

    Holds ``v_proj`` and ``out_proj`` only; its incremental state holds ``prev_value``
    only. Keys, masks and ``need_weights`` are the leader's business (its weights already
    hold the masks); it returns no weights of its own.
    """

    def __init__(self, source: MultiheadAttention, relay: Relay, release: bool):
        super().__init__(
            source.embed_dim,
            source.num_heads,
            dropout=source.dropout_module.p,
            self_attention=True,
        )
        assert source.bias_k is None and not source.add_zero_attn, "not built by fairseq's Transformer"
        del self.q_proj
        del self.k_proj
        # take over the source's modules: keeps their (trained or tied) parameters
        self.v_proj = source.v_proj
        self.out_proj = source.out_proj
        self.relay = relay
        self.release = release
        self.key = SELF

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        tgt_len, bsz, embed_dim = query.size()
        v = (
            self.v_proj(query)
            .contiguous()
            .view(tgt_len, bsz * self.num_heads, self.head_dim)
            .transpose(0, 1)
        )
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            if "prev_value" in saved_state:
                prev_value = saved_state["prev_value"]
                assert prev_value is not None
                v = torch.cat([prev_value.view(bsz * self.num_heads, -1, self.head_dim), v], dim=1)
            saved_state["prev_value"] = v.view(bsz, self.num_heads, -1, self.head_dim)
            self._set_input_buffer(incremental_state, saved_state)
        leader_weights = self.relay.take(self.key) if self.release else self.relay.get(self.key)
        assert leader_weights.size(-1) == v.size(1), "leader and follower lengths differ"
        probs = self.dropout_module(leader_weights.type_as(v))
        attn = torch.bmm(probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        return self.out_proj(attn), None


class CrossFollower(nn.Module):
    """Encoder-decoder attention of a follower: the leader's output (``out_proj`` None)
    or its own ``out_proj`` over the leader's context. Its weights are the leader's."""

    def __init__(self, num_heads: int, out_proj: Optional[nn.Linear], relay: Relay, release: bool):
        super().__init__()
        self.num_heads = num_heads
        self.out_proj = out_proj
        self.relay = relay
        self.release = release
        self.keys = (CROSS, CROSS_WEIGHTS)

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        output_key, weights_key = self.keys
        if self.release:
            shared, weights = self.relay.take(output_key), self.relay.take(weights_key)
        else:
            shared, weights = self.relay.get(output_key), self.relay.get(weights_key)
        if self.out_proj is not None:
            shared = self.out_proj(shared)
        attn_weights: Optional[Tensor] = None
        if need_weights or need_head_weights:
            tgt_len, bsz = query.size(0), query.size(1)
            attn_weights = weights.view(bsz, self.num_heads, tgt_len, -1).transpose(1, 0)
            if not need_head_weights:
                attn_weights = attn_weights.mean(dim=0)
        return shared, attn_weights

    def _set_input_buffer(
        self,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
        buffer: Dict[str, Optional[Tensor]],
    ):
        """Part of the interface fairseq's layer compiles (for ``prev_attn_state``, which
        fairseq's decoders never pass); a follower keeps no cache."""
        return incremental_state


def is_follower(attention: Optional[nn.Module]) -> bool:
    return isinstance(attention, (FollowerSelfAttention, CrossFollower))
