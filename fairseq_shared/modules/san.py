"""Attention-weight sharing between adjacent layers (Xiao et al. 2019, "SAN").

Built on fairseq's own classes; only what SAN changes is overridden.

Decoder self-attention
    A follower applies its block leader's post-softmax weights ``S^m`` to its own values:
    ``A^n = S^m V^n``. It holds only ``v_proj`` and ``out_proj`` (no Q/K parameters),
    computes no Q/K projection and caches ``prev_value`` only. The cache is reordered in
    beam search by fairseq's own ``MultiheadAttention.reorder_incremental_state``.
    The leader hands over the weights *before* its attention dropout; each follower
    applies its own attention dropout (training only).

Encoder-decoder attention
    A follower reuses its leader's attention output ``A^m`` (the encoder output, its value
    input, is the same for every layer). It computes no Q/K/V projections and keeps no
    encoder K/V cache. ``cross_reuse`` picks where the reuse happens:

    * ``output`` (default, faster): after the leader's output projection. The follower
      holds no attention parameters at all.
    * ``context``: before the output projection; the follower keeps its own ``out_proj``.

    In pre-norm models the follower's ``encoder_attn_layer_norm`` would only feed the
    query projection it no longer has, so it is removed too (post-norm keeps it).

Encoder self-attention (optional, off by default as in the paper)
    As decoder self-attention, without a cache.

Layers are built as ordinary fairseq layers and converted by ``configure_san`` after
construction, so followers hold no parameter they never use; the parameter names that
remain are the stock ones (``self_attn.v_proj.weight`` ...), so cross-layer parameter
tying by name composes with SAN.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
from torch import Tensor

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer.transformer_decoder import TransformerDecoderBase
from fairseq.models.transformer.transformer_encoder import TransformerEncoderBase
from fairseq.modules import MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from fairseq_shared.policy import (
    FLAGS,
    PolicyError,
    format_policy,
    is_trivial,
    leaders,
    paper_cross_policy,
    paper_self_policy,
    parse_policy,
)

CROSS_REUSE = ("output", "context")


def _heads_first_to_flat(probs: Tensor) -> Tensor:
    """fairseq's per-head weights ``(H, B, T, S)`` -> ``(B*H, T, S)`` as used in its bmm."""
    H, B, T, S = probs.shape
    return probs.transpose(0, 1).reshape(B * H, T, S)


class FollowerSelfAttention(MultiheadAttention):
    """Self-attention of a follower layer: ``out_proj(S_leader @ v_proj(x))``.

    Holds ``v_proj`` and ``out_proj`` only; its incremental state holds ``prev_value``
    only (reordered for beam search by the inherited ``reorder_incremental_state``).
    """

    def __init__(self, source: MultiheadAttention):
        super().__init__(
            source.embed_dim,
            source.num_heads,
            dropout=source.dropout_module.p,
            self_attention=True,
        )
        if source.bias_k is not None or source.add_zero_attn:
            raise ValueError("SAN followers do not support add_bias_kv / add_zero_attn")
        del self.q_proj
        del self.k_proj
        # take over the source's modules: keeps their (trained or tied) parameters
        self.v_proj = source.v_proj
        self.out_proj = source.out_proj

    def forward(  # type: ignore[override]
        self,
        query: Tensor,
        leader_probs: Tensor,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
    ) -> Tensor:
        """``query``: (T, B, C); ``leader_probs``: (B*H, T, S) post-softmax weights."""
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
                v = torch.cat(
                    [prev_value.view(bsz * self.num_heads, -1, self.head_dim), v], dim=1
                )
            saved_state["prev_value"] = v.view(bsz, self.num_heads, -1, self.head_dim)
            self._set_input_buffer(incremental_state, saved_state)
        assert leader_probs.size(-1) == v.size(1), "leader and follower lengths differ"
        probs = self.dropout_module(leader_probs.type_as(v))
        attn = torch.bmm(probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        return self.out_proj(attn)


class FollowerCrossProjection(nn.Module):
    """Encoder-decoder attention of a follower with ``cross_reuse=context``: its own
    output projection over the leader's attention context (heads concatenated)."""

    def __init__(self, out_proj: nn.Linear):
        super().__init__()
        self.out_proj = out_proj

    def forward(self, context: Tensor) -> Tensor:
        return self.out_proj(context)


class _ContextTap(nn.Linear):
    """The leader's ``out_proj`` when a follower needs the context before it: identical
    maths and parameter names, and it keeps its last input for the layer to hand on."""

    context: Optional[Tensor] = None

    def forward(self, input: Tensor) -> Tensor:
        self.context = input
        return super().forward(input)

    def pop_context(self) -> Tensor:
        ctx = self.context
        self.context = None
        assert ctx is not None
        return ctx

    @classmethod
    def wrap(cls, linear: nn.Linear) -> "_ContextTap":
        tap = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        tap.weight = linear.weight
        if linear.bias is not None:
            tap.bias = linear.bias
        return tap


# ---------------------------------------------------------------------------------------
# decoder
# ---------------------------------------------------------------------------------------


class SANDecoderLayer(TransformerDecoderLayerBase):
    """A fairseq decoder layer that can lead or follow in a SAN block.

    ``san_state`` (a dict created per forward pass by :class:`SANTransformerDecoder`)
    carries the leader's tensors down to its followers: ``"self"`` (B*H, T, S) weights,
    ``"cross"`` the attention output (or context) and ``"cross_attn"`` the leader's
    per-head weights (returned by followers as their alignment).
    """

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        self.has_cross = not no_encoder_attn
        self.self_follower = False
        self.self_exports = False
        self.cross_follower = False
        self.cross_exports = False
        self.cross_reuse = "output"
        self.collect = False  # record this layer's attention distributions (learn_policy)

    @property
    def san_active(self) -> bool:
        return self.self_follower or self.self_exports or self.cross_follower or self.cross_exports

    # ---- conversion ------------------------------------------------------------------
    def make_self_follower(self) -> None:
        if self.cross_self_attention:
            raise ValueError("SAN self-attention sharing does not support --cross-self-attention")
        self.self_attn = FollowerSelfAttention(self.self_attn)
        self.self_follower = True

    def make_self_exporter(self) -> None:
        # fairseq's fused fast path returns head-averaged weights only; the generic path
        # returns the per-head post-softmax weights the followers need.
        self.self_attn.skip_embed_dim_check = True
        self.self_exports = True

    def make_cross_follower(self, reuse: str) -> None:
        assert self.has_cross
        if reuse == "output":
            self.encoder_attn = None
        else:
            self.encoder_attn = FollowerCrossProjection(self.encoder_attn.out_proj)
        if self.normalize_before:
            self.encoder_attn_layer_norm = None  # only fed the removed query projection
        self.cross_follower = True
        self.cross_reuse = reuse

    def make_cross_exporter(self, reuse: str) -> None:
        if reuse == "context":
            self.encoder_attn.out_proj = _ContextTap.wrap(self.encoder_attn.out_proj)
        self.cross_exports = True
        self.cross_reuse = reuse

    # ---- forward ---------------------------------------------------------------------
    def forward(
        self,
        x,
        encoder_out: Optional[Tensor] = None,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        prev_self_attn_state: Optional[List[Tensor]] = None,
        prev_attn_state: Optional[List[Tensor]] = None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
        san_state: Optional[Dict[str, Tensor]] = None,
    ):
        if not self.san_active and not self.collect:
            return super().forward(
                x,
                encoder_out,
                encoder_padding_mask,
                incremental_state,
                prev_self_attn_state,
                prev_attn_state,
                self_attn_mask,
                self_attn_padding_mask,
                need_attn,
                need_head_weights,
            )
        if prev_self_attn_state is not None or prev_attn_state is not None:
            raise NotImplementedError("SAN layers do not take prev_*_attn_state")
        if self.cross_self_attention:
            raise NotImplementedError("SAN layers do not support --cross-self-attention")
        assert san_state is not None
        if need_head_weights:
            need_attn = True

        # ---- self-attention
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if self.self_follower:
            x = self.self_attn(x, san_state["self"], incremental_state)
            if self.collect:
                san_state["record_self"] = san_state["self_heads"]
        else:
            want = self.self_exports or self.collect
            x, probs = self.self_attn(
                query=x,
                key=x,
                value=x,
                key_padding_mask=self_attn_padding_mask,
                incremental_state=incremental_state,
                need_weights=want,
                need_head_weights=want,
                attn_mask=self_attn_mask,
            )
            if want:
                assert probs is not None and probs.dim() == 4, "per-head weights expected"
                san_state["self"] = _heads_first_to_flat(probs)
                if self.collect:
                    san_state["self_heads"] = probs
                    san_state["record_self"] = probs
        if self.c_attn is not None:
            tgt_len, bsz = x.size(0), x.size(1)
            x = x.view(tgt_len, bsz, self.nh, self.head_dim)
            x = torch.einsum("tbhd,h->tbhd", x, self.c_attn)
            x = x.reshape(tgt_len, bsz, self.embed_dim)
        if self.attn_ln is not None:
            x = self.attn_ln(x)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        # ---- encoder-decoder attention
        attn: Optional[Tensor] = None
        if self.has_cross and encoder_out is not None:
            residual = x
            if self.cross_follower:
                shared = san_state["cross"]
                y = shared if self.cross_reuse == "output" else self.encoder_attn(shared)
                attn = san_state.get("cross_attn")
            else:
                if self.normalize_before:
                    x = self.encoder_attn_layer_norm(x)
                want_heads = need_head_weights or self.cross_exports or self.collect
                y, attn = self.encoder_attn(
                    query=x,
                    key=encoder_out,
                    value=encoder_out,
                    key_padding_mask=encoder_padding_mask,
                    incremental_state=incremental_state,
                    static_kv=True,
                    need_weights=need_attn or want_heads or (not self.training and self.need_attn),
                    need_head_weights=want_heads,
                )
                if self.cross_exports:
                    san_state["cross"] = (
                        y if self.cross_reuse == "output" else self.encoder_attn.out_proj.pop_context()
                    )
                    if attn is not None:
                        san_state["cross_attn"] = attn
            if self.collect:
                san_state["record_cross"] = attn
            if attn is not None and attn.dim() == 4 and not need_head_weights:
                attn = attn.mean(dim=0)  # fairseq's head average
            x = self.dropout_module(y)
            x = self.residual_connection(x, residual)
            if not self.normalize_before:
                x = self.encoder_attn_layer_norm(x)

        # ---- feed-forward (as fairseq)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        if self.ffn_layernorm is not None:
            x = self.ffn_layernorm(x)
        x = self.fc2(x)
        x = self.dropout_module(x)
        if self.w_resid is not None:
            residual = torch.mul(self.w_resid, residual)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, attn, None


def describe_blocks(blocks: Optional[Sequence[int]]) -> str:
    if blocks is None:
        return "none"
    out, start = [], 1
    for b in blocks:
        out.append(f"{{{start}}}" if b == 1 else f"{{{start}-{start + b - 1}}}")
        start += b
    return " ".join(out)


class SANTransformerDecoder(TransformerDecoderBase):
    """fairseq's Transformer decoder whose layers can share attention (see module doc).

    Without a policy (``configure_san`` not called, or all-one policies) it runs fairseq's
    own ``extract_features_scriptable`` and layer ``forward``: identical to the stock
    decoder.
    """

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection)
        self.no_encoder_attn = no_encoder_attn
        self.san_self_policy: Optional[List[int]] = None
        self.san_cross_policy: Optional[List[int]] = None
        self.san_cross_reuse = "output"
        self.san_active = False
        self.collect_attention = False

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        # fairseq's build_decoder_layer with the layer class swapped
        layer = SANDecoderLayer(cfg, no_encoder_attn)
        checkpoint = cfg.checkpoint_activations
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def configure_san(
        self,
        self_policy: Optional[Sequence[int]],
        cross_policy: Optional[Sequence[int]],
        cross_reuse: str = "output",
    ) -> None:
        """Turn layers into leaders/followers. Call once, right after construction and
        before any parameter tying (followers drop their unused modules)."""
        if self.san_active:
            raise RuntimeError("configure_san was already applied to this decoder")
        if cross_reuse not in CROSS_REUSE:
            raise ValueError(
                f"--san-cross-reuse: unknown value '{cross_reuse}'; allowed: {', '.join(CROSS_REUSE)}"
            )
        if not is_trivial(cross_policy) and self.no_encoder_attn:
            raise ValueError(
                "--san-cross-policy: this decoder has no encoder-decoder attention "
                "(--no-cross-attention); allowed: leave --san-cross-policy unset"
            )
        self.san_self_policy = list(self_policy) if self_policy is not None else None
        self.san_cross_policy = list(cross_policy) if cross_policy is not None else None
        self.san_cross_reuse = cross_reuse
        layers = list(self.layers)
        if not all(isinstance(layer, SANDecoderLayer) for layer in layers):
            raise ValueError("SAN needs plain decoder layers (no activation checkpointing/FSDP)")
        if self.decoder_layerdrop > 0 and not (is_trivial(self_policy) and is_trivial(cross_policy)):
            raise ValueError("SAN policies cannot be combined with --decoder-layerdrop")
        if not is_trivial(self_policy):
            lead = leaders(self_policy)
            for i, layer in enumerate(layers):
                if lead[i] != i:
                    layer.make_self_follower()
                    layers[lead[i]].make_self_exporter()
        if not is_trivial(cross_policy):
            lead = leaders(cross_policy)
            for i, layer in enumerate(layers):
                if lead[i] != i:
                    layer.make_cross_follower(cross_reuse)
                    if not layers[lead[i]].cross_exports:
                        layers[lead[i]].make_cross_exporter(cross_reuse)
        self.san_active = any(layer.san_active for layer in layers)

    def describe_san(self) -> str:
        return (
            f"self {describe_blocks(self.san_self_policy)}, cross "
            f"{describe_blocks(self.san_cross_policy)} (reuse {self.san_cross_reuse})"
        )

    def set_collect_attention(self, on: bool) -> None:
        """Record every layer's per-head self and encoder-decoder attention (eval only)
        in ``extra["san_self_attn"]`` / ``extra["san_cross_attn"]``, (H, B, T, S) each."""
        self.collect_attention = on
        for layer in self.layers:
            layer.collect = on
            if not layer.self_follower:
                layer.self_attn.skip_embed_dim_check = on or layer.self_exports

    def extract_features_scriptable(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        if not self.san_active and not self.collect_attention:
            return super().extract_features_scriptable(
                prev_output_tokens,
                encoder_out,
                incremental_state,
                full_context_alignment,
                alignment_layer,
                alignment_heads,
            )
        # fairseq's loop, passing the leaders' attention down through ``san_state``
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1

        enc: Optional[Tensor] = None
        padding_mask: Optional[Tensor] = None
        if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
            enc = encoder_out["encoder_out"][0]
        if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
            padding_mask = encoder_out["encoder_padding_mask"][0]

        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        prev_output_tokens = prev_output_tokens.contiguous()
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x += positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)

        self_attn_padding_mask: Optional[Tensor] = None
        if self.cross_self_attention or prev_output_tokens.eq(self.padding_idx).any():
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)

        san_state: Dict[str, Tensor] = {}
        record_self: List[Optional[Tensor]] = []
        record_cross: List[Optional[Tensor]] = []
        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        for idx, layer in enumerate(self.layers):
            if incremental_state is None and not full_context_alignment:
                self_attn_mask = self.buffered_future_mask(x)
            else:
                self_attn_mask = None
            x, layer_attn, _ = layer(
                x,
                enc,
                padding_mask,
                incremental_state,
                self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask,
                need_attn=bool((idx == alignment_layer)),
                need_head_weights=bool((idx == alignment_layer)),
                san_state=san_state,
            )
            inner_states.append(x)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)
            if self.collect_attention:
                record_self.append(san_state.pop("record_self", None))
                record_cross.append(san_state.pop("record_cross", None))

        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]
            attn = attn.mean(dim=0)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        extra = {"attn": [attn], "inner_states": inner_states}
        if self.collect_attention:
            extra["san_self_attn"] = record_self
            extra["san_cross_attn"] = record_cross
        return x, extra

    def upgrade_state_dict_named(self, state_dict, name):
        state_dict = super().upgrade_state_dict_named(state_dict, name)
        prefix = f"{name}." if name else ""
        expected = {prefix + k for k in self.state_dict().keys() if ".layers." in "." + k}
        present = {k for k in state_dict if k.startswith(prefix + "layers.")}
        extra = sorted(k for k in present - expected if "attn" in k)
        missing = sorted(k for k in expected - present if "attn" in k)
        if extra or missing:
            raise ValueError(
                "checkpoint's decoder attention parameters do not match this model's SAN "
                f"policy ({self.describe_san()}): unexpected {extra[:4]}{'...' if len(extra) > 4 else ''}, "
                f"missing {missing[:4]}{'...' if len(missing) > 4 else ''}. It was trained with "
                "another policy: convert it with `python -m fairseq_shared.cli.convert_policy`."
            )
        return state_dict


# ---------------------------------------------------------------------------------------
# encoder (optional)
# ---------------------------------------------------------------------------------------


class SANEncoderLayer(TransformerEncoderLayerBase):
    """Encoder layer for optional SAN in the encoder. Leaders and followers of a block
    share one relay dict (set by :meth:`SANTransformerEncoder.configure_san`, emptied by
    the encoder around every forward pass)."""

    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        self.san_relay: Optional[Dict[str, Tensor]] = None
        self.self_follower = False
        self.self_exports = False

    def forward(self, x, encoder_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor] = None):
        if not (self.self_follower or self.self_exports):
            return super().forward(x, encoder_padding_mask, attn_mask)
        assert self.san_relay is not None
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(
                attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4
            )
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if self.self_follower:
            x = self.self_attn(x, self.san_relay["self"])
        else:
            x, probs = self.self_attn(
                query=x,
                key=x,
                value=x,
                key_padding_mask=encoder_padding_mask,
                need_weights=True,
                need_head_weights=True,
                attn_mask=attn_mask,
            )
            self.san_relay["self"] = _heads_first_to_flat(probs)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        x = self.fc2(x)
        fc_result = x
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        if self.return_fc and not torch.jit.is_scripting():
            return x, fc_result
        return x


class SANTransformerEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.san_policy: Optional[List[int]] = None
        self._san_relay: Dict[str, Tensor] = {}

    def build_encoder_layer(self, cfg):
        layer = SANEncoderLayer(cfg, return_fc=self.return_fc)
        checkpoint = cfg.checkpoint_activations
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def configure_san(self, policy: Optional[Sequence[int]]) -> None:
        self.san_policy = list(policy) if policy is not None else None
        if is_trivial(policy):
            return
        layers = list(self.layers)
        if not all(isinstance(layer, SANEncoderLayer) for layer in layers):
            raise ValueError("SAN needs plain encoder layers (no activation checkpointing/FSDP)")
        if self.encoder_layerdrop > 0:
            raise ValueError("--san-encoder-policy cannot be combined with --encoder-layerdrop")
        lead = leaders(policy)
        for i, layer in enumerate(layers):
            layer.san_relay = self._san_relay
            if lead[i] != i:
                layer.self_attn = FollowerSelfAttention(layer.self_attn)
                layer.self_follower = True
                layers[lead[i]].self_exports = True
                layers[lead[i]].self_attn.skip_embed_dim_check = True

    def forward_scriptable(self, src_tokens, src_lengths: Optional[Tensor] = None,
                           return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None):
        self._san_relay.clear()
        try:
            return super().forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        finally:
            self._san_relay.clear()


def san_summary(decoder: SANTransformerDecoder, encoder: Optional[SANTransformerEncoder] = None) -> str:
    s = decoder.describe_san()
    if encoder is not None and not is_trivial(encoder.san_policy):
        s += f", encoder self {describe_blocks(encoder.san_policy)}"
    return s


# ---------------------------------------------------------------------------------------
# command-line flags
# ---------------------------------------------------------------------------------------

SAN_ARGS = ("san_self_policy", "san_cross_policy", "san_encoder_policy", "san_cross_reuse")


@dataclass(frozen=True)
class SANConfig:
    self_policy: Optional[List[int]] = None
    cross_policy: Optional[List[int]] = None
    encoder_policy: Optional[List[int]] = None
    cross_reuse: str = "output"

    @property
    def active(self) -> bool:
        return not (
            is_trivial(self.self_policy)
            and is_trivial(self.cross_policy)
            and is_trivial(self.encoder_policy)
        )


def add_san_args(parser) -> None:
    parser.add_argument(
        "--san-self-policy", type=str, metavar="BLOCKS",
        help="decoder self-attention sharing (Xiao et al. 2019): adjacent block sizes summing "
        "to --decoder-layers, e.g. 1,5; each block's first layer computes the attention "
        "weights, the others reuse them with their own values. Unset or all 1s: no sharing",
    )
    parser.add_argument(
        "--san-cross-policy", type=str, metavar="BLOCKS",
        help="decoder encoder-decoder attention sharing: block sizes summing to "
        "--decoder-layers, e.g. 2,2,2; followers reuse the leader's attention output",
    )
    parser.add_argument(
        "--san-cross-reuse", type=str, metavar="WHERE", choices=CROSS_REUSE,
        help="where encoder-decoder followers reuse the leader's attention: output (after its "
        "output projection; no attention parameters in followers; default, faster) or "
        "context (before it; each follower keeps its own output projection)",
    )
    parser.add_argument(
        "--san-encoder-policy", type=str, metavar="BLOCKS",
        help="encoder self-attention sharing (not in the paper; off by default): block "
        "sizes summing to --encoder-layers",
    )


def san_base_defaults(args) -> None:
    for name in SAN_ARGS:
        if getattr(args, name, None) is None:
            setattr(args, name, "output" if name == "san_cross_reuse" else None)


def san_paper_defaults(args) -> None:
    """transformer_san: the paper's learned 6-layer policy, self {1},{2-6} and cross
    {1,2},{3,4},{5,6}, generalised to N layers as {1},{2..N} and pairs."""
    n = args.decoder_layers
    if getattr(args, "san_self_policy", None) is None:
        args.san_self_policy = format_policy(paper_self_policy(n))
    if getattr(args, "san_cross_policy", None) is None:
        args.san_cross_policy = format_policy(paper_cross_policy(n))


def san_config_from_args(args) -> SANConfig:
    """Validate the SAN flags of ``args``; errors name the flag and the allowed values."""

    def get(name):
        value = getattr(args, name, None)
        return None if value in (None, "", "none") else value

    reuse = get("san_cross_reuse") or "output"
    if reuse not in CROSS_REUSE:
        raise PolicyError(
            f"--san-cross-reuse: unknown value '{reuse}'; allowed: {', '.join(CROSS_REUSE)}"
        )
    self_p = get("san_self_policy")
    cross_p = get("san_cross_policy")
    enc_p = get("san_encoder_policy")
    n_dec = args.decoder_layers
    self_policy = parse_policy(self_p, n_dec, FLAGS["self"]) if self_p else None
    cross_policy = parse_policy(cross_p, n_dec, FLAGS["cross"]) if cross_p else None
    enc_policy = (
        parse_policy(enc_p, args.encoder_layers, FLAGS["encoder"]) if enc_p else None
    )
    if not is_trivial(cross_policy) and getattr(args, "no_cross_attention", False):
        raise PolicyError(
            f"{FLAGS['cross']}: the model has no encoder-decoder attention "
            "(--no-cross-attention); allowed: leave it unset"
        )
    if not is_trivial(self_policy) and getattr(args, "cross_self_attention", False):
        raise PolicyError(
            f"{FLAGS['self']}: not supported with --cross-self-attention; allowed: leave it unset"
        )
    if (not is_trivial(self_policy) or not is_trivial(cross_policy)) and (
        getattr(args, "decoder_layerdrop", 0) or 0
    ) > 0:
        raise PolicyError(
            f"{FLAGS['self']}/{FLAGS['cross']}: a dropped leader would leave its followers "
            "without attention; allowed with --decoder-layerdrop 0 only"
        )
    if not is_trivial(enc_policy) and (getattr(args, "encoder_layerdrop", 0) or 0) > 0:
        raise PolicyError(
            f"{FLAGS['encoder']}: allowed with --encoder-layerdrop 0 only"
        )
    if (getattr(args, "checkpoint_activations", False)) and any(
        not is_trivial(p) for p in (self_policy, cross_policy, enc_policy)
    ):
        raise PolicyError("SAN policies are not supported with --checkpoint-activations")
    return SANConfig(self_policy, cross_policy, enc_policy, reuse)


__all__ = [
    "CROSS_REUSE",
    "FollowerSelfAttention",
    "FollowerCrossProjection",
    "SANDecoderLayer",
    "SANTransformerDecoder",
    "SANEncoderLayer",
    "SANTransformerEncoder",
    "SANConfig",
    "add_san_args",
    "san_base_defaults",
    "san_config_from_args",
    "san_paper_defaults",
]
