"""Experiments: the papers' tables reproduced on a prepared corpus, and the recipes' training.

Modules, one job each: :mod:`.configs` (the configuration catalogue and the budgets),
:mod:`.commands` (every fairseq command line: executables and ``--user-dir``),
:mod:`.corpus` (a prepared corpus's layout), :mod:`.runs` (one configuration under one
budget, the plan), :mod:`.training` (fairseq-train with progress and ETA, its logs),
:mod:`.decode` (the cached interleaved decoding run), :mod:`.tables` (rows and the papers'
Markdown tables), :mod:`.markdown` (table cells), :mod:`.plots`, :mod:`.reproduce` (the whole pipeline),
:mod:`.recipe_runs` (train / average / evaluate a recipe). Decoding speed is measured by
:mod:`fairseq_shared.timing`. The command lines are ``python -m fairseq_shared.cli.reproduce`` and
``python -m fairseq_shared.data.recipes``.
"""
