"""The one training-rate meter: seconds per update of a configuration trained from scratch (or
restarted from a late checkpoint of a long run, ``--from``), in its steady state (after
fairseq's first logged interval: start-up, the first batches), alone or beside busy processes
(the load benchmark's ``--beside``), under an OpenMP wait policy.

    python -m harness.budget rates --data work/bible \\
        --out results/bible_budget/train_rate.json --configs vanilla,cycle_rev_2L --threads 2
"""

import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterator, List, Sequence

from fairseq_shared.errors import FairseqSharedError
from harness import cpu_load
from harness.cpu_clock import read_cpu_log
from harness.statistics import markdown_table
from harness.training import log_records, train

BUSY_LOOP = "while True: pass"


def steady_rates(inner: List[Dict], cpu: List[Dict]) -> Dict:
    """Steady-state rates from fairseq's train_inner records and one attempt's cpu.jsonl
    lines: the first logged interval (start-up, the first batches) is left out, also where the
    attempt started from a checkpoint (its first line is that update)."""
    ups = [float(r["ups"]) for r in inner[1:]]
    logged = [r for r in cpu if r["update"] > cpu[0]["update"]] if cpu else []
    if not ups or len(logged) < 2:
        raise FairseqSharedError("--updates: too few logged intervals for a steady rate; "
                                 "train at least 3 log intervals")
    first, last = logged[0], logged[-1]
    cpu_per_update = (last["cpu"] - first["cpu"]) / (last["update"] - first["update"])
    wall_per_update = 1 / statistics.median(ups)
    return {"steady_s_per_update": round(wall_per_update, 3),
            "steady_cpu_s_per_update": round(cpu_per_update, 3),
            "cores_busy": round(cpu_per_update / wall_per_update, 2),
            "steady_updates": last["update"] - first["update"]}


def logged_policy(log_path: str) -> str:
    """The wait policy the last attempt in a train.log ran under (the header line of each start,
    :func:`training.start_header`), or ``"?"``."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        found = [m[1] for m in (re.match(r"# .*?OMP_WAIT_POLICY (\w+)", line) for line in f) if m]
    return found[-1] if found else "?"


def checkpoint_at(runs_dir: str, config_name: str, update: int) -> str:
    """The interval checkpoint ``runs_dir/<config>/checkpoint_<epoch>_<update>.pt`` of a budget
    run (a work directory's ``runs_s<seed>``); where there is none, the error names
    ``--from-update`` and the updates that are there."""
    from fairseq_shared.tools.averaging import UPDATE_PATTERN

    folder = os.path.join(runs_dir, config_name)
    kept = sorted((int(m[1]), m[0]) for m in map(UPDATE_PATTERN.fullmatch, (
        os.listdir(folder) if os.path.isdir(folder) else [])) if m)
    found = [name for u, name in kept if u == update]
    if len(found) != 1:
        raise FairseqSharedError(
            f"--from-update: no checkpoint of {config_name} at update {update} in {folder}; "
            f"there: {', '.join(str(u) for u, _ in kept) if kept else 'none'}")
    return os.path.join(folder, found[0])


def measure_run(run, policy: str = None, progress=lambda *a: None, start: str = None) -> Dict:
    """Train ``run`` under ``policy`` (``training.wait_policy``) from scratch, or on from the
    checkpoint ``start`` (its directory is emptied first either way); its steady rates, the
    policy it ran under, the process's wall seconds."""
    shutil.rmtree(run.dir, ignore_errors=True)
    if start:
        os.makedirs(run.dir)
        shutil.copyfile(start, run.checkpoint)
    t0 = time.time()
    train(run, progress, policy=policy)
    wall = time.time() - t0
    log_path = os.path.join(run.dir, "train.log")
    inner = [r for kind, r in log_records(log_path) if kind == "train_inner"]
    rates = steady_rates(inner, read_cpu_log(os.path.join(run.dir, "cpu.jsonl")))
    return {**rates, "wait_policy": logged_policy(log_path), "process_wall_s": round(wall, 1)}


def measure(config_name: str, threads: int, data: str, updates: int, budget_name: str,
            policy: str = None, start_from: str = None, start_update: int = 0) -> Dict:
    """One budget configuration's row: its budget-curve command shortened to ``updates``
    updates without interval checkpoints, at ``threads`` threads; with ``start_from`` (a budget
    work directory's ``runs_s<seed>``), the ``updates`` after its checkpoint at
    ``start_update``, which show whether an update costs more late in training."""
    from harness.configs import CONFIGS, load_budget, select_configs
    from harness.runs import make_plan

    start = checkpoint_at(start_from, config_name, start_update) if start_from else None
    budget = load_budget(budget_name, [f"max_update={start_update + updates}",
                                       "save_interval_updates=0", f"threads={threads}"])
    with tempfile.TemporaryDirectory() as out:
        run = make_plan(select_configs(CONFIGS, config_name, None), budget, data, out)[0]
        rates = measure_run(run, policy, start=start)
    return {"config": config_name, "threads": threads, "updates": updates, "params": run.params,
            **({"from_update": start_update} if start else {}), **rates}


@contextlib.contextmanager
def beside(n: int) -> Iterator[List[int]]:
    """``n`` busy single-threaded processes (at this process's nice value) while the block
    runs; their pids. Each is killed and reaped when the block ends, also on an error."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], stdin=subprocess.DEVNULL)
             for _ in range(n)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()


def measure_beside(n: int, config_name: str, threads: int, data: str, updates: int,
                   budget_name: str, policy: str, **start) -> Dict:
    """:func:`measure` with ``n`` busy processes beside it; the row records them and the cores
    busy at the trainer's nice value, sampled once they run."""
    with beside(n):
        load = cpu_load.sample_busy_cores(1.0) if n else None
        row = measure(config_name, threads, data, updates, budget_name, policy, **start)
    return {**row, "beside": n, "requested_policy": policy,
            "busy_cores_measured": round(load[0], 2) if load else None}


def table(rows: Sequence[Dict]) -> str:
    """Seconds per update of each configuration, threads and requested policy (rows) alone and
    beside each count of busy processes (columns), as Markdown."""
    counts = sorted({r["beside"] for r in rows})
    head = ["config", "threads", "wait policy"] + [
        "alone" if n == 0 else f"beside {n}" for n in counts]
    key = lambda r: (r["config"], r["threads"], r["requested_policy"])  # noqa: E731
    cell = {(key(r), r["beside"]): f"{r['steady_s_per_update']:.2f} ({r['wait_policy']})"
            for r in reversed(rows)}  # reversed: the first row of a key and count wins
    body = [[c, str(t), p] + [cell.get(((c, t, p), n), "-") for n in counts]
            for c, t, p in dict.fromkeys(map(key, rows))]
    return "\n".join(markdown_table(head, body)) + "\n"
