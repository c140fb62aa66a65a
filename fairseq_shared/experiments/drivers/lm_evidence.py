"""Decoder-only LM runs on the English Bible corpus: train, score and record one run per file.

    python -m fairseq_shared.cli.bible_lm --bible work/bible --out work/bible_lm
    python -m fairseq_shared.cli.lm_evidence baselines --data work/bible_lm
    python -m fairseq_shared.cli.lm_evidence run --data work/bible_lm [--queue vanilla_L3:1,...] [--commit]
    python -m fairseq_shared.cli.lm_evidence plan --data work/bible_lm
    python -m fairseq_shared.cli.lm_evidence render
    python -m fairseq_shared.cli.lm_evidence rates --data work/bible_lm

``run`` is a worker of the run queue (:mod:`fairseq_shared.experiments.queue`): it takes the next item of the queue
(:data:`fairseq_shared.experiments.lm_evidence.QUEUE`) that is neither finished (its
``RESULTS/runs/<name>_s<seed>.json`` exists) nor claimed by another worker, and goes on until
none is left; start one worker per core. With ``--commit`` each finished run's file is
committed at once. ``baselines`` writes the unigram and 5-gram Kneser-Ney perplexities
(``baselines.json``); ``render`` rebuilds ``tables.md`` and ``learning_curves.png`` from the
committed files; ``rates`` times a short run of vanilla 3 and 6 layers (``rates.json``).
"""

import json
import os
import sys
from pathlib import Path

from fairseq_shared.experiments import lm_evidence, queue
from fairseq_shared.experiments.queue_cli import Command, main as queue_main, print_plan

DEFAULT_RESULTS = "results/bible_lm"


def plan(args, items):
    from fairseq_shared.experiments.runs import make_plan

    budget = lm_evidence.load_lm_budget(args.budget, args.set)
    _, bin_dir = lm_evidence.lm_paths(args.data)
    plan_dir = os.path.join(args.work, "plan")
    runs = {r.name: r for r in make_plan(
        [lm_evidence.LM_CONFIGS[n] for n in dict.fromkeys(i.name for i in items)], budget,
        bin_dir, plan_dir, runs_dir=plan_dir, run_class=lm_evidence.LMRun)}
    print(f"budget {budget['name']}: {budget['max_update']} updates; ", end="")
    states = print_plan(COMMAND, args, items, lambda i: ", " + (
        f"{runs[i.name].params:,} params" if runs[i.name].params
        else f"skipped: {runs[i.name].skip_reason}"))
    rates = Path(args.results) / "rates.json"
    todo = [(i.name, i.seed) for i, s in zip(items, states) if s != "done"]
    if todo and rates.exists():
        measured = json.loads(rates.read_text(encoding="utf-8"))
        cpu, wall = (lm_evidence.estimate_minutes(todo, budget["max_update"], measured, key)
                     for key in ("cpu_s_per_update", "wall_s_per_update"))
        print(f"training left: {cpu:.0f} worker-minutes at the measured CPU rates, {wall:.0f} "
              f"at the measured wall rates under contention ({rates}); plus evaluation and "
              "start-up, about 2 minutes per run")


def render(args) -> str:
    from fairseq_shared.experiments import lm_report

    return "\n".join(lm_report.render(args.results).values())


def baselines_arguments(s):
    s.add_argument("--data", required=True, help="the LM corpus (work/bible_lm, with bin/)")


def baselines(args) -> int:
    from fairseq_shared.experiments.lm_baselines import write_baselines

    lm_evidence.snapshot_corpus(args.data, args.results)
    print(write_baselines(lm_evidence.lm_paths(args.data)[1], args.results))
    return 0


def rates_arguments(s):
    baselines_arguments(s)
    s.add_argument("--work", default="work/lm_evidence", help="checkpoints, logs, claims")
    s.add_argument("--updates", type=int, default=40)


def rates(args) -> int:
    measured = [lm_evidence.measure_rate(n, args.data, args.work, args.updates)
                for n in ("vanilla_L3", "vanilla_L6")]
    path = Path(args.results) / "rates.json"
    queue.write_result(path, measured)
    print(path)
    return 0


COMMAND = Command(
    lm_evidence.SUITE, __doc__, results=DEFAULT_RESULTS, work="work/lm_evidence", budget="lm",
    items=lambda args: [queue.Item(n, s) for n, s in queue.parse_queue(
        args.queue, lm_evidence.QUEUE, lm_evidence.LM_CONFIGS)],
    render=render, prepare=lambda args: lm_evidence.snapshot_corpus(args.data, args.results),
    plan=plan, plan_needs_data=True,
    commands={"baselines": (baselines_arguments, baselines), "rates": (rates_arguments, rates)})


def main(argv=None):
    return queue_main(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())
