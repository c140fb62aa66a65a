"""Record every decoder layer's attention for learning a policy, with forward hooks.

    with AttentionRecorder(model.decoder) as recorder:
        model(**net_input)
        selfs, crosses = recorder.pop()   # per layer (H, B, T, S), or None

The hooks ask each computing attention module for its per-head weights (fairseq's own
``need_head_weights``) and keep them; a follower's distributions are its leader's. The
model's forward pass is untouched; the hooks are gone when the block ends.
"""

from typing import Dict, List, Optional, Tuple

from torch import Tensor

from fairseq_shared.san.attention import is_follower

KINDS = ("self", "cross")


class AttentionRecorder:
    def __init__(self, decoder):
        self.layers = list(decoder.layers)
        self.records: Dict[Tuple[str, int], Tensor] = {}
        self._handles = []
        self._skip_check = []

    def __enter__(self) -> "AttentionRecorder":
        for i, layer in enumerate(self.layers):
            for kind, attention in zip(KINDS, (layer.self_attn, layer.encoder_attn)):
                if attention is not None and not is_follower(attention):
                    self._watch(kind, i, attention)
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        for attention, value in self._skip_check:
            attention.skip_embed_dim_check = value
        self._handles, self._skip_check = [], []
        self.records.clear()

    def _watch(self, kind: str, index: int, attention) -> None:
        # PyTorch's fused path returns head averages only; fairseq's returns every head
        self._skip_check.append((attention, attention.skip_embed_dim_check))
        attention.skip_embed_dim_check = True

        def ask_for_heads(module, args, kwargs):
            return args, {**kwargs, "need_weights": True, "need_head_weights": True}

        def keep(module, args, kwargs, output):
            self.records[(kind, index)] = output[1]

        self._handles += [
            attention.register_forward_pre_hook(ask_for_heads, with_kwargs=True),
            attention.register_forward_hook(keep, with_kwargs=True),
        ]

    def pop(self) -> Tuple[List[Optional[Tensor]], List[Optional[Tensor]]]:
        """The last forward pass's (self, cross) weights per layer; followers get their
        leader's (the nearest computing layer before them: blocks are adjacent)."""
        out = []
        for kind in KINDS:
            maps: List[Optional[Tensor]] = []
            last: Optional[Tensor] = None
            for i in range(len(self.layers)):
                last = self.records.get((kind, i), last)
                maps.append(last)
            out.append(maps)
        self.records.clear()
        return out[0], out[1]
