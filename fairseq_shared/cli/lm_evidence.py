"""Decoder-only LM runs on the English Bible corpus: train, score and record one run per file.

    python -m fairseq_shared.data.bible_lm --bible work/bible --out work/bible_lm
    python -m fairseq_shared.cli.lm_evidence baselines --data work/bible_lm
    python -m fairseq_shared.cli.lm_evidence run --data work/bible_lm [--queue vanilla_L3:1,...] [--commit]
    python -m fairseq_shared.cli.lm_evidence plan --data work/bible_lm
    python -m fairseq_shared.cli.lm_evidence render
    python -m fairseq_shared.cli.lm_evidence rates --data work/bible_lm

``run`` is a worker: it takes the next item of the queue
(:data:`fairseq_shared.experiments.lm_evidence.QUEUE`) that is neither finished (its
``RESULTS/runs/<name>_s<seed>.json`` exists) nor claimed by another worker, and goes on until
none is left; start one worker per core. With ``--commit`` each finished run's file is
committed at once. ``baselines`` writes the unigram and 5-gram Kneser-Ney perplexities
(``baselines.json``); ``render`` rebuilds ``tables.md`` and ``learning_curves.png`` from the
committed files; ``rates`` times a short run of vanilla 3 and 6 layers (``rates.json``).
"""

import argparse
import json
import os
import sys
from pathlib import Path

from fairseq_shared.experiments import evidence, lm_evidence

DEFAULT_RESULTS = "results/bible_lm"


def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("run", "plan", "baselines", "rates"):
        s = sub.add_parser(name)
        s.add_argument("--data", required=True, help="the LM corpus (work/bible_lm, with bin/)")
        s.add_argument("--results", default=DEFAULT_RESULTS)
        if name in ("run", "plan", "rates"):
            s.add_argument("--work", default="work/lm_evidence", help="checkpoints, logs, claims")
        if name in ("run", "plan"):
            s.add_argument("--budget", default="lm", help="lm (default) or tiny")
            s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           help="override one budget value")
            s.add_argument("--queue", default=None,
                           help="name:seed,... (default: the full queue)")
        if name == "run":
            s.add_argument("--commit", action="store_true",
                           help="git-commit each finished run's file at once")
        if name == "rates":
            s.add_argument("--updates", type=int, default=40)
    r = sub.add_parser("render")
    r.add_argument("--results", default=DEFAULT_RESULTS)
    return p


def plan(args, items):
    from fairseq_shared.experiments.lm_runs import load_lm_budget, plan_runs

    budget = load_lm_budget(args.budget, args.set)
    _, bin_dir = lm_evidence.lm_paths(args.data)
    names = list(dict.fromkeys(n for n, _ in items))
    params = {r.name: (r.params, r.skip_reason) for r in plan_runs(names, budget, bin_dir,
                                                                    os.path.join(args.work, "plan"))}
    done = [i for i in items if lm_evidence.result_path(args.results, *i).exists()]
    print(f"budget {budget['name']}: {budget['max_update']} updates; "
          f"{len(done)}/{len(items)} finished:")
    for name, seed in items:
        count, skip = params[name]
        state = "done" if (name, seed) in done else "todo"
        print(f"  {lm_evidence.item_id(name, seed)}: {state}, "
              + (f"{count:,} params" if count else f"skipped: {skip}"))
    rates = Path(args.results) / "rates.json"
    todo = [i for i in items if i not in done]
    if todo and rates.exists():
        measured = json.loads(rates.read_text(encoding="utf-8"))
        cpu, wall = (lm_evidence.estimate_minutes(todo, budget["max_update"], measured, key)
                     for key in ("cpu_s_per_update", "wall_s_per_update"))
        print(f"training left: {cpu:.0f} worker-minutes at the measured CPU rates, {wall:.0f} "
              f"at the measured wall rates under contention ({rates}); plus evaluation and "
              "start-up, about 2 minutes per run")


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "render":
        from fairseq_shared.experiments import lm_report

        print("\n".join(lm_report.render(args.results).values()))
        return 0
    if args.command == "baselines":
        from fairseq_shared.experiments.lm_baselines import write_baselines

        lm_evidence.snapshot_corpus(args.data, args.results)
        print(write_baselines(lm_evidence.lm_paths(args.data)[1], args.results))
        return 0
    if args.command == "rates":
        rates = [lm_evidence.measure_rate(n, args.data, args.work, args.updates)
                 for n in ("vanilla_L3", "vanilla_L6")]
        path = Path(args.results) / "rates.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rates, indent=1, default=str) + "\n", encoding="utf-8")
        print(path)
        return 0
    items = lm_evidence.parse_queue(args.queue)
    if args.command == "plan":
        plan(args, items)
        return 0
    from fairseq_shared.fairseq_commands import terminate_on_sigterm

    terminate_on_sigterm()
    lm_evidence.snapshot_corpus(args.data, args.results)
    repo = evidence.results_repository(args.results) if args.commit else None
    finished = lm_evidence.work_queue(items, args.data, args.work, args.results, args.budget,
                                      args.set, commit_repo=repo)
    print(f"[lm] this worker finished: {', '.join(finished) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
