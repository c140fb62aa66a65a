"""The evidence runs on a prepared corpus: train, decode and record one run per file.

    python -m fairseq_shared.cli.evidence run --data work/bible [--queue vanilla:1,...] [--commit]
    python -m fairseq_shared.cli.evidence plan --data work/bible
    python -m fairseq_shared.cli.evidence render

``run`` is a worker of the run queue (:mod:`fairseq_shared.experiments.queue`): it takes the
next item of the queue (default: Takase & Kiyono's core rows with 2 seeds, then the rest; see
:data:`fairseq_shared.experiments.evidence.QUEUE`) that is neither finished (its
``RESULTS/runs/<name>_s<seed>.json`` exists) nor held by another worker, and goes on until
none is left. Start one worker per core. With ``--commit`` each finished run's files are
committed at once, so a stopped session loses nothing. ``render`` rebuilds
``RESULTS/tables.md``, ``summary.csv`` and ``learning_curves.png`` from the run files.
"""

import sys

from fairseq_shared.experiments import evidence, queue
from fairseq_shared.experiments.queue_cli import Command, main as queue_main

DEFAULT_RESULTS = "results/bible_clean"


def render(args) -> str:
    from fairseq_shared.experiments import evidence_report

    paths = evidence_report.render(args.results, command="python -m fairseq_shared.cli."
                                   "evidence run --data work/bible --commit")
    return "\n".join(paths.values())


COMMAND = Command(
    evidence.SUITE, __doc__, results=DEFAULT_RESULTS, work="work/evidence", budget="evidence",
    items=lambda args: [queue.Item(n, s) for n, s in evidence.parse_queue(args.queue)],
    render=render, prepare=lambda args: evidence.snapshot_corpus(args.data, args.results))


def main(argv=None):
    return queue_main(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())
