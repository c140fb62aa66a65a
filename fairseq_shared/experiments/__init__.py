"""Experiments: the papers' tables reproduced on a prepared corpus, and the run queue's suites.

Modules, one job each: :mod:`.configs` (the configuration catalogue and the budgets),
:mod:`.corpus` (a prepared corpus's layout), :mod:`.runs` (one configuration under one
budget, its parameter count, the plan), :mod:`.training` (fairseq-train with progress and
ETA, its logs), :mod:`.decode` (the cached interleaved decoding run), :mod:`.tables` (rows and
the papers' Markdown tables), :mod:`.plots`, :mod:`.reproduce` (the whole pipeline); the run
queue and its suites (:mod:`.queue`, :mod:`.queue_cli`, :mod:`.evidence`,
:mod:`.budget_curve`, :mod:`.lm_evidence`, :mod:`.relaxed`, :mod:`.frontier` and their
reports). Decoding speed is measured by :mod:`fairseq_shared.timing`. The argparse mains of
the suites are :mod:`.drivers` (``python -m fairseq_shared.cli.reproduce``,
``python -m fairseq_shared.cli.evidence`` ... run them).
"""
