"""Training speed of configurations on this machine, measured in one run (the budget-curve
compute plan, and the training-cost ratios of its tables).

    python scripts/thread_rate.py --data work/bible --out results/bible_budget/train_rate.json \
        --configs vanilla,cycle_rev_2L,... --threads 2 --updates 150

Trains each configuration from scratch with its budget-curve command, shortened to
``--updates`` updates without interval checkpoints (``training.train``, as the budget worker
runs it), at each of ``--threads``. It records the steady state, after fairseq's first logged
interval: wall seconds per update (median of the logged intervals) and CPU seconds per update
of the fairseq-train process tree (``cpu.jsonl``, as every budget run records it), and the
machine. The budget runs' own CPU totals come from several machines and loads; ratios of
these rates come from one machine, one data order, one run.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Dict, List

from fairseq_shared.experiments.configs import CONFIGS, load_budget, select_configs
from fairseq_shared.experiments.cpu_clock import read_cpu_log
from fairseq_shared.experiments.runs import make_plan
from fairseq_shared.experiments.training import log_records, train
from fairseq_shared.timing import machine


def steady_rates(inner: List[Dict], cpu: List[Dict]) -> Dict:
    """Steady-state rates from fairseq's train_inner records and one attempt's cpu.jsonl
    lines: the first logged interval (start-up, the first batches) is left out."""
    ups = [float(r["ups"]) for r in inner[1:]]
    logged = [r for r in cpu if r["update"] > 0]
    if not ups or len(logged) < 2:
        raise SystemExit("--updates: too few logged intervals for a steady rate; "
                         "train at least 3 log intervals")
    first, last = logged[0], logged[-1]
    cpu_per_update = (last["cpu"] - first["cpu"]) / (last["update"] - first["update"])
    wall_per_update = 1 / statistics.median(ups)
    return {"steady_s_per_update": round(wall_per_update, 3),
            "steady_cpu_s_per_update": round(cpu_per_update, 3),
            "cores_busy": round(cpu_per_update / wall_per_update, 2),
            "steady_updates": last["update"] - first["update"]}


def measure(config_name: str, threads: int, data: str, updates: int, budget_name: str) -> Dict:
    budget = load_budget(budget_name, [f"max_update={updates}", "save_interval_updates=0",
                                       f"threads={threads}"])
    with tempfile.TemporaryDirectory() as out:
        run = make_plan(select_configs(CONFIGS, config_name, None), budget, data, out,
                        log=lambda *a: None)[0]
        t0 = time.time()
        train(run, lambda *a: None, 1, 1, t0)
        wall = time.time() - t0
        inner = [r for kind, r in log_records(os.path.join(run.dir, "train.log"))
                 if kind == "train_inner"]
        rates = steady_rates(inner, read_cpu_log(os.path.join(run.dir, "cpu.jsonl")))
    return {"config": config_name, "threads": threads, "updates": updates, "params": run.params,
            **rates, "process_wall_s": round(wall, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--configs", default="vanilla,vanilla_2L")
    p.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    p.add_argument("--updates", type=int, default=150)
    p.add_argument("--budget", default="budget_curve")
    args = p.parse_args()
    try:
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        p.error(f"--threads {args.threads!r}: comma-separated thread counts, e.g. 1,2")
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    for name in args.configs.split(","):
        for t in threads:
            rows.append(measure(name, t, args.data, args.updates, args.budget))
            print(json.dumps(rows[-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(["python"] + sys.argv), "budget": args.budget,
                   "started": started, "machine": machine.describe(), "rows": rows,
                   "load_average_at_end": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
