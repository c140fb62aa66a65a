"""Experiments: the papers' comparisons on a prepared corpus, as suites of one run queue.

Modules, one job each: :mod:`.configs` (the configuration catalogue and the budgets),
:mod:`.corpus` (a prepared corpus's layout), :mod:`.runs` (one configuration under one
budget, its parameter count, the plan), :mod:`.training` (fairseq-train with progress and
ETA, its logs), :mod:`.decode` (the main job's cached interleaved decoding run),
:mod:`.tables` (the main job's table); the run queue and its suites (:mod:`.queue`,
:mod:`.queue_cli`, :mod:`.evidence`, :mod:`.budget_curve`, :mod:`.lm_evidence`,
:mod:`.relaxed`, :mod:`.frontier` and their reports), whose reports share
:mod:`.statistics` (seed-aware statistics, loaders of committed records, curve figures). Decoding speed is measured by :mod:`fairseq_shared.timing`. The argparse mains of
the suites are :mod:`.drivers` (``python -m fairseq_shared.cli.main_job``,
``python -m fairseq_shared.cli.evidence`` ... run them).
"""
