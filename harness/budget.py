"""The budget curves on a prepared corpus: each core configuration trained in stages to 8,000
updates (or its early stop), the test set decoded and committed at every milestone.

    python -m harness.budget run --data work/bible [--queue vanilla:1,...] [--commit]
    python -m harness.budget plan
    python -m harness.budget render [--results results/bible_clean]
    python -m harness.budget rates --data work/bible --out RATES.json \
        [--configs vanilla,...] [--threads 1,2] [--beside 0,1,2] [--wait-policy AUTO,...]
    python -m harness.budget reproduce --data work/bible [--from results/bible_budget] \
        [--rows vanilla_s1,...] [--results work/reproduce/bible_budget] [--commit]

``run`` is a worker of the run queue (:mod:`harness.queue`; one per core):
the next item of :data:`harness.budget_curve.QUEUE` that is neither finished
nor held by another worker (``--budget evidence --results results/bible_clean``: the papers'
comparisons at 2,000 updates, one stage, any configuration). With ``--commit`` each
milestone's files are committed the moment they exist, and the final record when the run ends.
``render`` rebuilds ``RESULTS/tables.md``, ``RESULTS/budget_curves.png``, ``RESULTS/summary.md``
and the frontier of the final models (``RESULTS/frontier/``) from the committed files (results
without milestones: the equal-updates tables, ``summary.csv`` and ``learning_curves.png``).
``reproduce`` trains committed rows again into a fresh folder and compares them
(:mod:`harness.reproduce`; results/bible_budget/REPRODUCE.md).
``rates`` measures each configuration's steady seconds per update from scratch
(:mod:`harness.train_rate`), alone or beside ``--beside`` busy processes
(the load benchmark, ``results/load_benchmark/``), under each ``--wait-policy``.
"""

import itertools
import json
import os
import sys
import time
from pathlib import Path

from fairseq_shared.errors import FairseqSharedError
from harness import budget_curve, queue, reproduce
from harness.corpus import snapshot_corpus
from harness.queue_cli import Command, main as queue_main, print_plan

DEFAULT_RESULTS = "results/bible_budget"


def render(args) -> str:
    from harness import budget_report

    return "\n".join(budget_report.render(args.results).values())


def plan(args, items):
    from harness.configs import load_budget, staged

    budget = load_budget(args.budget, args.set)
    if staged(budget):
        print(f"budget {budget['name']}: milestones {budget['milestones']}, at most "
              f"{budget['max_update']} updates, early stop after {budget['patience']} validations "
              f"(every {budget['save_interval_updates']} updates) without a better valid loss")
    else:
        print(f"budget {budget['name']}: {budget['max_update']} updates, one stage")
    print_plan(args, items)
    for item in items:
        done = sorted(budget_curve.milestone_path(args.results, item.name, item.seed, 0)
                      .parent.glob(f"{item.id}_u*.json"))
        if done:
            print(f"  {item.id}: milestones written: "
                  f"{', '.join(p.stem.rsplit('_u', 1)[1] for p in done)}")


def add_rates_arguments(p):
    from fairseq_shared.cli import arg_types
    from harness.cpu_load import policy_list

    p.add_argument("--data", required=True, help="the prepared corpus")
    p.add_argument("--out", required=True, help="the JSON file written (a Markdown table beside)")
    p.add_argument("--configs", default="vanilla,vanilla_2L")
    p.add_argument("--threads", type=arg_types.positive_int_list, default=[1, 2],
                   help="thread counts, e.g. 1,2")
    p.add_argument("--updates", type=arg_types.positive_int, default=150)
    p.add_argument("--budget", default="budget_curve")
    p.add_argument("--beside", type=arg_types.non_negative_int_list, default=[0],
                   help="busy single-threaded processes beside each measurement, e.g. 0,1,2")
    p.add_argument("--wait-policy", type=policy_list, default=["AUTO"],
                   help="OpenMP wait policies, e.g. DEFAULT,AUTO,PASSIVE (default AUTO)")
    p.add_argument("--from", dest="start_from", metavar="RUNS_DIR",
                   help="restart each configuration from its checkpoint in RUNS_DIR/<config>/ "
                        "(a work directory's runs_s<seed>) at --from-update, not from scratch")
    p.add_argument("--from-update", dest="start_update", type=arg_types.positive_int,
                   help="the update of the --from checkpoints")


def rates(args) -> int:
    from harness import train_rate
    from fairseq_shared.timing import machine

    if (args.start_from is None) != (args.start_update is None):
        raise FairseqSharedError("--from and --from-update go together: the runs directory and "
                                 "the update of its checkpoints")
    start = {"start_from": args.start_from, "start_update": args.start_update or 0}
    rows, started = [], time.strftime("%Y-%m-%d %H:%M:%S")
    for name, threads, policy, n in itertools.product(args.configs.split(","), args.threads,
                                                      args.wait_policy, args.beside):
        rows.append(train_rate.measure_beside(n, name, threads, args.data, args.updates,
                                              args.budget, policy, **start))
        print(json.dumps(rows[-1]), flush=True)
    queue.write_result(Path(args.out), {
        "command": " ".join(["python -m harness.budget"] + sys.argv[1:]),
        "budget": args.budget, "started": started, "machine": machine.describe(),
        "rows": rows, "load_average_at_end": os.getloadavg()})
    table = train_rate.table(rows)
    Path(args.out).with_suffix(".md").write_text(table, encoding="utf-8")
    print(table)
    return 0


COMMAND = Command(
    budget_curve.SUITE, __doc__, results=DEFAULT_RESULTS, work="work/budget", budget="budget_curve",
    items=lambda args: [queue.Item(n, s)
                        for n, s in budget_curve.parse_queue(args.queue, args.budget, args.set)],
    render=render, plan=plan, prepare=lambda args: snapshot_corpus(args.data, args.results),
    commands={"rates": (add_rates_arguments, rates),
              "reproduce": (reproduce.add_arguments, reproduce.run)})


def main(argv=None):
    return queue_main(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())
