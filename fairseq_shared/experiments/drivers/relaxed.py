"""Relaxed sharing, converted models and a learned map on a prepared corpus, against the
evidence runs (:mod:`fairseq_shared.experiments.relaxed`).

    python -m fairseq_shared.cli.relaxed run --data work/bible [--seeds 1] [--commit]
    python -m fairseq_shared.cli.relaxed plan
    python -m fairseq_shared.cli.relaxed render

``run`` is a worker of the run queue like ``cli.budget run`` (one per core; claims; each
finished item's files committed at once with ``--commit``); items whose inputs (the evidence
runs they convert or compare with) are not finished yet wait for them. ``render``
rebuilds ``RESULTS/tables.md`` from the run files.
"""

from fairseq_shared.cli import arg_types
from fairseq_shared.experiments import relaxed
from fairseq_shared.experiments.queue_cli import Command, main as queue_main

DEFAULT_RESULTS = "results/bible_relaxed"
EVIDENCE_RESULTS = "results/bible_clean"
COMMAND_LINE = "python -m fairseq_shared.cli.relaxed run --data work/bible --commit"


def add_arguments(s, command):
    s.add_argument("--evidence-results", default=EVIDENCE_RESULTS)
    if command == "render":
        return
    s.add_argument("--seeds", type=arg_types.non_negative_int_list, default="1",
                   help="comma-separated seeds (default 1)")
    s.add_argument("--evidence-work", default="work/evidence",
                   help="the evidence runs' checkpoints (what is converted and compared)")


def dirs(args):
    return {"results": args.results, "work": args.work, "evidence_work": args.evidence_work,
            "evidence_results": args.evidence_results}


def items(args):
    if args.set:
        raise SystemExit("--set: the relaxed items use the evidence runs' budget as it is, "
                         "so that they compare with them; no override is allowed")
    return relaxed.items(args.seeds, dirs(args))


def render(args) -> str:
    from fairseq_shared.experiments import relaxed_report

    return relaxed_report.render(args.results, args.evidence_results, COMMAND_LINE)


COMMAND = Command(
    relaxed.SUITE, __doc__, results=DEFAULT_RESULTS, work="work/relaxed", budget="evidence",
    items=items, render=render,
    add_arguments=add_arguments, extra=dirs, queue_option=False)


def main(argv=None):
    return queue_main(COMMAND, argv)
