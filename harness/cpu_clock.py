"""Training cost in CPU seconds, which other jobs on the machine do not inflate.

fairseq logs wall-clock seconds (``train_wall``); on a shared 2-core machine those grow with
whatever else runs. A run with one thread uses one core's CPU time per update however busy the
machine is (at two threads only on a quiet machine: a thread waiting for its preempted partner
spins, and the spin counts; results/bible_budget/README.md, twenty-sixth stretch), so the
evidence runs also record the CPU seconds of the fairseq-train process tree
at every logged update (``cpu.jsonl`` in the run directory, one line per logged update):
``{"attempt": ..., "update": u, "cpu": seconds since the attempt started}``.

:func:`cpu_per_update` turns those lines into the CPU cost of every update: a later attempt
(resumed from an earlier checkpoint) overwrites the updates it redid, and updates of an
attempt that recorded nothing (a run started before this was recorded) are estimated with the
median cost per update of the recorded ones, and counted as estimated.
"""

import json
import os
import statistics
from typing import Dict, List, Optional, Tuple

from harness.child import stat_fields

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_tree_cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU seconds of ``pid`` and its live direct children (fairseq's data
    loader workers); None where /proc is not available (not Linux)."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    total = int(fields[11]) + int(fields[12])  # utime, stime
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pid:
            child = stat_fields(int(entry))
            if child is not None and int(child[1]) == pid:  # ppid
                total += int(child[11]) + int(child[12])
    return total / _TICK


class CpuLog:
    """Appends ``cpu.jsonl`` lines for one training attempt of the process ``pid``."""

    def __init__(self, run_dir: str, pid: int, attempt: str, start_update: int):
        self.path = os.path.join(run_dir, "cpu.jsonl")
        self.pid, self.attempt = pid, attempt
        self.write(start_update, 0.0)

    def write(self, update: int, cpu: Optional[float] = None) -> None:
        if cpu is None:
            cpu = process_tree_cpu_seconds(self.pid)
            if cpu is None:
                return
        with open(self.path, "a") as f:
            f.write(json.dumps({"attempt": self.attempt, "update": update, "cpu": cpu}) + "\n")


def read_cpu_log(path: str) -> List[Dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_per_update(records: List[Dict], total_updates: int) -> Tuple[List[float], int]:
    """(CPU seconds of each update 1..total_updates, how many of them are estimated)."""
    cost: List[Optional[float]] = [None] * total_updates
    previous: Dict[str, Tuple[int, float]] = {}
    for rec in records:  # in the order written: later attempts overwrite earlier ones
        attempt, update, cpu = rec["attempt"], int(rec["update"]), float(rec["cpu"])
        if attempt in previous:
            u0, c0 = previous[attempt]
            if update > u0:
                rate = (cpu - c0) / (update - u0)
                for u in range(u0, min(update, total_updates)):
                    cost[u] = rate
        previous[attempt] = (update, cpu)
    known = [c for c in cost if c is not None]
    if not known:
        return [], total_updates
    fill = statistics.median(known)
    return [fill if c is None else c for c in cost], sum(c is None for c in cost)


def cumulative_cpu(costs: List[float], update: int) -> float:
    """CPU seconds spent up to and including ``update`` (1-based)."""
    return sum(costs[:update])
