"""Sequence-level knowledge distillation (``fairseq-shared-distill``): a teacher's translations of
a corpus's training side, as a new corpus. Above :mod:`fairseq_shared.export` (the teacher's
CTranslate2 copy) and :mod:`fairseq_shared.timing` (the test set's reader): :mod:`.run` does the
work, :mod:`.checks` refuses what would make it silently wrong."""
