"""The research harness: the papers' comparisons on a prepared corpus, as suites of one run queue.
It lives beside the plug-in (``fairseq_shared``), is not shipped in its wheel and runs from the
checkout (``python -m harness.budget``, ``harness.frontier``, ``harness.main_job``); the plug-in
never imports it.

Modules, one job each: :mod:`.configs` (configurations and budgets), :mod:`.corpus` (a corpus's
layout and its snapshot beside the results), :mod:`.runs` (one configuration under one budget),
:mod:`.training` (fairseq-train, its logs), :mod:`.run_record` (a trained run's record),
:mod:`.decode` and :mod:`.tables` (the main job's decoding and table); the run queue
(:mod:`.queue`, :mod:`.queue_cli`) and its suites (:mod:`.budget_curve`, every budget from
``evidence`` to ``budget_long``; :mod:`.frontier_engines`), whose reports share :mod:`.statistics`.
Decoding speed is measured by :mod:`fairseq_shared.timing`; the argparse mains of the suites are
:mod:`.budget`, :mod:`.frontier` and :mod:`.main_job`.
"""
