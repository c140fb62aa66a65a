"""Training speed of one run at 1 and 2 threads (the budget-curve compute plan).

    python scripts/thread_rate.py --data work/bible --out results/bible_budget/thread_rate.json

Trains each configuration of the evidence budget for ``--updates`` updates from scratch with
``OMP_NUM_THREADS`` = 1, then 2, and records fairseq's steady-state updates per second
(median of the logged intervals after the first) and the CPU seconds of the whole process.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from fairseq_shared.experiments.configs import CONFIGS, load_budget, select_configs
from fairseq_shared.experiments.runs import make_plan
from fairseq_shared.experiments.training import log_records


def measure(config_name, threads, data, updates):
    budget = load_budget("evidence", [f"max_update={updates}", "save_interval_updates=100000"])
    with tempfile.TemporaryDirectory() as out:
        run = make_plan(select_configs(CONFIGS, config_name, None), budget, data, out,
                        log=lambda *a: None)[0]
        cmd = run.train_command() + ["--no-save", "--disable-validation"]
        log = os.path.join(out, "train.log")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        with open(log, "w") as f:
            subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, check=True)
        wall = time.time() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        ups = [float(r["ups"]) for kind, r in log_records(log) if kind == "train_inner"][1:]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"config": config_name, "threads": threads, "updates": updates,
            "steady_s_per_update": round(1 / statistics.median(ups), 3),
            "process_wall_s": round(wall, 1), "process_cpu_s": round(cpu, 1),
            "cores_busy": round(cpu / wall, 2)}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--configs", default="vanilla,vanilla_2L")
    p.add_argument("--updates", type=int, default=150)
    args = p.parse_args()
    rows = []
    for name in args.configs.split(","):
        for threads in (1, 2):
            rows.append(measure(name, threads, args.data, args.updates))
            print(json.dumps(rows[-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(["python"] + sys.argv), "rows": rows,
                   "load_average_at_end": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
