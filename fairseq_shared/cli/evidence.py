"""The evidence runs on a prepared corpus: train, decode and record one run per file.

    python -m fairseq_shared.cli.evidence run --data work/bible [--queue vanilla:1,...] [--commit]
    python -m fairseq_shared.cli.evidence plan --data work/bible
    python -m fairseq_shared.cli.evidence render

``run`` is a worker: it takes the next item of the queue (default: Takase & Kiyono's core
rows with 2 seeds, then the rest; see :data:`fairseq_shared.experiments.evidence.QUEUE`) that is neither
finished (its ``RESULTS/runs/<name>_s<seed>.json`` exists) nor claimed by another worker, and
goes on until none is left. Start one worker per core. With ``--commit`` each finished run's
files are committed at once, so a stopped session loses nothing. ``render`` rebuilds
``RESULTS/tables.md``, ``summary.csv`` and ``learning_curves.png`` from the run files.
"""

import argparse
import sys

from fairseq_shared.experiments import evidence

DEFAULT_RESULTS = "results/bible_clean"


def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("run", "plan"):
        s = sub.add_parser(name)
        s.add_argument("--data", required=True, help="prepared corpus (bin/, raw/, audit.json)")
        s.add_argument("--work", default="work/evidence", help="checkpoints, logs, claims")
        s.add_argument("--results", default=DEFAULT_RESULTS)
        s.add_argument("--budget", default="evidence", help="a reproduce budget (default evidence)")
        s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override one budget value")
        s.add_argument("--queue", default=None, help="name:seed,... (default: the full queue)")
        if name == "run":
            s.add_argument("--commit", action="store_true",
                           help="git-commit each finished run's files at once")
    r = sub.add_parser("render")
    r.add_argument("--results", default=DEFAULT_RESULTS)
    return p


def plan(args, items):
    done = [i for i in items if evidence.result_path(args.results, *i).exists()]
    print(f"{len(done)}/{len(items)} finished:")
    for name, seed in items:
        state = "done" if (name, seed) in done else "todo"
        print(f"  {evidence.item_id(name, seed)}: {state}")


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "render":
        from fairseq_shared.experiments import evidence_report

        paths = evidence_report.render(args.results, command="python -m fairseq_shared.cli."
                                       "evidence run --data work/bible --commit")
        print("\n".join(paths.values()))
        return 0
    items = evidence.parse_queue(args.queue)
    if args.command == "plan":
        plan(args, items)
        return 0
    from fairseq_shared.cli.reproduce import _terminate_on_sigterm

    _terminate_on_sigterm()
    evidence.snapshot_corpus(args.data, args.results)
    repo = evidence.results_repository(args.results) if args.commit else None
    finished = evidence.work_queue(items, args.data, args.work, args.results, args.budget,
                                   args.set, commit_repo=repo)
    print(f"[evidence] this worker finished: {', '.join(finished) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
