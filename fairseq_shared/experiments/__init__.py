"""Experiments: the papers' comparisons on a prepared corpus, as suites of one run queue.

Modules, one job each: :mod:`.configs` (the configuration catalogue and the budgets),
:mod:`.corpus` (a prepared corpus's layout and its snapshot beside the results),
:mod:`.runs` (one configuration under one budget, its parameter count, the plan),
:mod:`.training` (fairseq-train with progress and ETA, its logs), :mod:`.run_record` (one
trained run's record), :mod:`.decode` (the main job's cached interleaved decoding run, a run's
test set scored), :mod:`.tables` (the main job's table); the run queue and its suites
(:mod:`.queue`, :mod:`.queue_cli`, :mod:`.budget_curve` (the translation suite, every budget
from the 2,000-update ``evidence`` to ``budget_long``), :mod:`.frontier` and their
reports), whose reports share
:mod:`.statistics` (seed-aware statistics, loaders of committed records, curve figures). Decoding speed is measured by :mod:`fairseq_shared.timing`. The argparse mains of
the suites are :mod:`.drivers` (``python -m fairseq_shared.cli.main_job``,
``python -m fairseq_shared.cli.budget`` ... run them).
"""
