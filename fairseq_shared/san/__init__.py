"""Attention-weight sharing between adjacent layers (Xiao et al. 2019, "SAN").

A block's first layer, its leader, computes attention; the other layers of the block,
its followers, reuse it:

* decoder self-attention: a follower applies the leader's post-softmax weights to its own
  values, ``A^n = S^m V^n`` (no Q/K; it caches values only);
* encoder-decoder attention: a follower reuses the leader's attention output, after
  (``--san-cross-reuse output``) or before (``context``) the leader's output projection;
  it computes no projection of the encoder output and caches nothing;
* encoder self-attention (optional, off by default as in the paper): as the decoder's.

Modules: :mod:`~fairseq_shared.san.policy` (policies and the Jensen-Shannon similarity, pure),
:mod:`~fairseq_shared.san.flags` (the flags and their validation; the model's one validation
entry is :mod:`fairseq_shared.models.config`), :mod:`~fairseq_shared.san.attention` (leader
taps and followers, swapped into fairseq's layers), :mod:`~fairseq_shared.san.relay` (leader
-> followers, TorchScript-safe), :mod:`~fairseq_shared.san.stacks` (encoder and decoder).
Learning a policy, converting a checkpoint to another one and the paper's LEARNTOSHARE loop
are checkpoint tools: :mod:`fairseq_shared.tools.learn_policy`,
:mod:`fairseq_shared.tools.convert_policy`, :mod:`fairseq_shared.tools.policy_rounds`.
"""

from fairseq_shared.san.stacks import SANTransformerDecoder, SANTransformerEncoder

__all__ = ["SANTransformerDecoder", "SANTransformerEncoder"]
