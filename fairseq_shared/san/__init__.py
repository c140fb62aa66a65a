"""Attention-weight sharing between adjacent layers (Xiao et al. 2019, "SAN").

A block's first layer, its leader, computes attention; the other layers of the block,
its followers, reuse it:

* decoder self-attention: a follower applies the leader's post-softmax weights to its own
  values, ``A^n = S^m V^n`` (no Q/K; it caches values only);
* encoder-decoder attention: a follower reuses the leader's attention output, after
  (``--san-cross-reuse output``) or before (``context``) the leader's output projection;
  it computes no projection of the encoder output and caches nothing;
* encoder self-attention (optional, off by default as in the paper): as the decoder's.

Modules: :mod:`~fairseq_shared.san.attention` (leader taps and followers, swapped into fairseq's
layers), :mod:`~fairseq_shared.san.relay` (leader -> followers, TorchScript-safe),
:mod:`~fairseq_shared.san.stacks` (encoder and decoder), :mod:`~fairseq_shared.san.record`
(attention recording), :mod:`~fairseq_shared.san.learn` (learning a policy from the
recorded attention), :mod:`~fairseq_shared.san.convert` (a checkpoint under another policy),
:mod:`~fairseq_shared.san.learn_to_share` (the paper's LEARNTOSHARE loop). Policies and
similarity: :mod:`fairseq_shared.policy`. The flags and their one validation:
:mod:`fairseq_shared.models.config`.
"""

from fairseq_shared.san.stacks import SANTransformerDecoder, SANTransformerEncoder

__all__ = ["SANTransformerDecoder", "SANTransformerEncoder"]
