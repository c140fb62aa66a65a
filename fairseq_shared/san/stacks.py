"""fairseq's Transformer encoder and decoder with attention-weight sharing (SAN).

Only construction differs from fairseq: ``configure_san`` swaps the attention modules of
fairseq's own layers for the leaders' taps and the followers of
:mod:`fairseq_shared.san.attention`, all sharing one relay per stack. The forward passes,
incremental decoding and beam-search reordering are fairseq's, so the model scripts with
TorchScript like fairseq's Transformer. Without a policy nothing is swapped: the stacks
are fairseq's.

Followers hold no parameter they never use; the names that remain are the stock ones
(``self_attn.v_proj.weight`` ...), so cross-layer parameter tying by name composes with
SAN. In pre-norm models an encoder-decoder follower's ``encoder_attn_layer_norm`` only
fed the query projection it no longer has: it becomes ``nn.Identity`` (no parameters).
"""

from typing import List, Optional, Sequence

import torch.nn as nn
from fairseq.models.transformer.transformer_decoder import TransformerDecoderBase
from fairseq.models.transformer.transformer_encoder import TransformerEncoderBase
from fairseq.modules import MultiheadAttention

from fairseq_shared.san.flags import DEFAULT_CROSS_REUSE
from fairseq_shared.san.policy import PolicyError, describe_policy, is_trivial, layer_blocks
from fairseq_shared.san.attention import (
    CROSS,
    CROSS_WEIGHTS,
    SELF,
    CrossFollower,
    FollowerSelfAttention,
    ProjectionTap,
    WeightTap,
)
from fairseq_shared.san.relay import Relay


def _policy(blocks: Optional[Sequence[int]]) -> Optional[List[int]]:
    return list(blocks) if blocks is not None else None


def _followed_blocks(policy: Optional[Sequence[int]]) -> List[List[int]]:
    return [] if is_trivial(policy) else [b for b in layer_blocks(policy) if len(b) > 1]


def make_leader(attention: MultiheadAttention, relay: Relay, key: str) -> None:
    """Let ``attention`` publish its post-softmax weights under ``key``."""
    attention.dropout_module = WeightTap(attention.dropout_module, relay, key)
    attention.skip_embed_dim_check = True  # fairseq's path, where the dropout sees the weights


def share_self_attention(layers: Sequence[nn.Module], policy, relay: Relay) -> None:
    for leader, *followers in _followed_blocks(policy):
        make_leader(layers[leader].self_attn, relay, SELF)
        for i in followers:
            layers[i].self_attn = FollowerSelfAttention(
                layers[i].self_attn, relay, release=i == followers[-1]
            )


def share_cross_attention(layers: Sequence[nn.Module], policy, reuse: str, relay: Relay) -> None:
    for leader, *followers in _followed_blocks(policy):
        lead = layers[leader].encoder_attn
        make_leader(lead, relay, CROSS_WEIGHTS)
        lead.out_proj = ProjectionTap(lead.out_proj, relay, CROSS, publish_input=reuse == "context")
        for i in followers:
            layer = layers[i]
            own_proj = layer.encoder_attn.out_proj if reuse == "context" else None
            layer.encoder_attn = CrossFollower(lead.num_heads, own_proj, relay, release=i == followers[-1])
            if layer.normalize_before:
                layer.encoder_attn_layer_norm = nn.Identity()


class SANTransformerDecoder(TransformerDecoderBase):
    """fairseq's Transformer decoder whose layers can share attention (module doc)."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection)
        self.san_self_policy: Optional[List[int]] = None
        self.san_cross_policy: Optional[List[int]] = None
        self.san_cross_reuse = DEFAULT_CROSS_REUSE
        self.san_active = False

    def configure_san(self, self_policy, cross_policy,
                      cross_reuse: str = DEFAULT_CROSS_REUSE) -> None:
        """Apply policies validated by :func:`~fairseq_shared.models.config.model_config`.
        Call once, right after construction and before any parameter tying (followers
        drop their unused modules)."""
        assert not self.san_active, "configure_san was already applied to this decoder"
        self.san_self_policy = _policy(self_policy)
        self.san_cross_policy = _policy(cross_policy)
        self.san_cross_reuse = cross_reuse
        relay = Relay()
        share_self_attention(self.layers, self_policy, relay)
        share_cross_attention(self.layers, cross_policy, cross_reuse, relay)
        self.san_active = not (is_trivial(self_policy) and is_trivial(cross_policy))

    def describe_san(self) -> str:
        return (
            f"self {describe_policy(self.san_self_policy)}, cross "
            f"{describe_policy(self.san_cross_policy)} (reuse {self.san_cross_reuse})"
        )

    def upgrade_state_dict_named(self, state_dict, name):
        state_dict = super().upgrade_state_dict_named(state_dict, name)
        prefix = f"{name}." if name else ""
        expected = {prefix + k for k in self.state_dict().keys() if ".layers." in "." + k}
        present = {k for k in state_dict if k.startswith(prefix + "layers.")}
        extra = sorted(k for k in present - expected if "attn" in k)
        missing = sorted(k for k in expected - present if "attn" in k)
        if extra or missing:
            raise PolicyError(
                "checkpoint's decoder attention parameters do not match this model's SAN "
                f"policy ({self.describe_san()}): unexpected {extra[:4]}{'...' if len(extra) > 4 else ''}, "
                f"missing {missing[:4]}{'...' if len(missing) > 4 else ''}. It was trained with "
                "another policy: convert it with `python -m fairseq_shared.cli.convert_policy`."
            )
        return state_dict


class SANTransformerEncoder(TransformerEncoderBase):
    """fairseq's Transformer encoder with optional self-attention sharing (not in the paper)."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.san_policy: Optional[List[int]] = None

    def configure_san(self, policy) -> None:
        self.san_policy = _policy(policy)
        share_self_attention(self.layers, policy, Relay())
