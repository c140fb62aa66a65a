"""Checkpoint tools, the library side of the commands in :mod:`fairseq_shared.cli`.

* :mod:`.checkpoints` -- the one helper every tool (and the export) opens a checkpoint and
  writes a rebuilt one with: the refusal of what a tool cannot take, the config rule;
* :mod:`.convert_sharing` -- a trained model converted to another sharing map (set means,
  SVD initialised LoRA deltas, residuals);
* :mod:`.learn_sharing` (with :mod:`.layer_similarity`, pure) -- a sharing map proposed from
  how alike the layers are;
* :mod:`.convert_policy`, :mod:`.learn_policy`, :mod:`.policy_rounds` -- a SAN policy
  changed, learned from the attention, and the paper's LEARNTOSHARE rounds;
* :mod:`.averaging` -- checkpoint averaging with safe loading, ties kept.
"""
