"""Relaxed sharing, converted models and a learned map on a prepared corpus, against the
evidence runs (:mod:`fairseq_shared.experiments.relaxed`).

    python -m fairseq_shared.cli.relaxed run --data work/bible [--seeds 1] [--commit]
    python -m fairseq_shared.cli.relaxed plan
    python -m fairseq_shared.cli.relaxed render

``run`` is a worker like ``cli.evidence run`` (one per core; claims; each finished item's
files committed at once with ``--commit``); items whose inputs (the evidence runs they
convert or compare with) are not finished yet are left for a later worker. ``render``
rebuilds ``RESULTS/tables.md`` from the run files.
"""

import argparse
import sys

from fairseq_shared.experiments import evidence, relaxed

DEFAULT_RESULTS = "results/bible_relaxed"
EVIDENCE_RESULTS = "results/bible_clean"
COMMAND = "python -m fairseq_shared.cli.relaxed run --data work/bible --commit"


def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("run", "plan", "render"):
        s = sub.add_parser(name)
        s.add_argument("--results", default=DEFAULT_RESULTS)
        s.add_argument("--evidence-results", default=EVIDENCE_RESULTS)
        if name == "render":
            continue
        s.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
        s.add_argument("--work", default="work/relaxed", help="checkpoints, logs, claims")
        s.add_argument("--evidence-work", default="work/evidence",
                       help="the evidence runs' checkpoints (what is converted and compared)")
        if name == "run":
            s.add_argument("--data", required=True, help="the evidence runs' prepared corpus")
            s.add_argument("--budget", default="evidence")
            s.add_argument("--commit", action="store_true",
                           help="git-commit each finished item's files at once")
    return p


def parse_seeds(text: str):
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise SystemExit(f"--seeds: '{text}' is not a comma-separated list of integers") from None
    return seeds


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "render":
        from fairseq_shared.experiments import relaxed_report

        print(relaxed_report.render(args.results, args.evidence_results, COMMAND))
        return 0
    dirs = {"results": args.results, "work": args.work, "evidence_work": args.evidence_work,
            "evidence_results": args.evidence_results}
    seeds = parse_seeds(args.seeds)
    if args.command == "plan":
        for seed in seeds:
            for kind, name, settings in relaxed.ITEMS:
                if relaxed.finished(args.results, name, seed):
                    state = "done"
                else:
                    need = relaxed.missing_inputs(kind, settings, seed, dirs)
                    state = f"waits for {', '.join(need)}" if need else "ready"
                print(f"  {name}_s{seed} ({kind}): {state}")
        return 0
    from fairseq_shared.cli.reproduce import _terminate_on_sigterm

    _terminate_on_sigterm()
    repo = evidence.results_repository(args.results) if args.commit else None
    done = relaxed.work_queue(seeds, args.data, dirs, args.budget, commit_repo=repo)
    print(f"[relaxed] this worker finished: {', '.join(done) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
