"""How a trainer's OpenMP threads should wait, chosen from the machine's load at its start.

OpenMP's default (libgomp) spins at every barrier before it sleeps. Alone, that is the fastest;
beside another busy process a spinning thread holds the core its partner waits for (issue 38:
vanilla 3+3 with two threads went from about 0.6 s/update alone to 1.5 beside one busy
process, and 0.8 with ``OMP_WAIT_POLICY=PASSIVE``). Sleeping at once costs time alone, so
``AUTO`` (the default of the main job and the queue) samples the cores busy at nice 0 for
:data:`SAMPLE_SECONDS` before a trainer starts (:func:`busy_cores`, from two ``/proc/stat``
readings: the load average still counts the previous stage's trainer for a minute) and keeps
the default when a core is free for each thread, else sleeps (:func:`wait_policy_for`). Work
at a positive nice value (``nice -n 19``) yields to the trainer and is not counted, unless the
trainer is niced itself. When the trainer cannot get its threads, :func:`load_warning` says so
with the slowdown a fair share gives. Load that starts after a trainer is not seen; the budget
worker chooses again at every stage. The load benchmark (``results/load_benchmark/``,
``python -m harness.budget rates --beside 0,1,2 --wait-policy DEFAULT,AUTO,PASSIVE``)
measures each policy.

All functions but :func:`sample_busy_cores` are pure.
"""

import os
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

POLICIES = ("AUTO", "DEFAULT", "PASSIVE", "ACTIVE")
SAMPLE_SECONDS = 0.5
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest time is inside user)
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_BUSY = ("user", "system", "irq", "softirq", "steal")  # not "nice": niced work yields


def parse_stat(text: str) -> Dict[str, int]:
    """The machine-wide ``cpu`` line of ``/proc/stat`` as jiffies per field, plus ``cpus`` (the
    number of ``cpuN`` lines)."""
    fields, cpus = None, 0
    for line in text.splitlines():
        parts = line.split() or [""]
        if parts[0] == "cpu":
            values = [int(v) for v in parts[1:1 + len(_FIELDS)]]
            fields = dict(zip(_FIELDS, values + [0] * (len(_FIELDS) - len(values))))
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            cpus += 1
    if fields is None:
        raise ValueError("/proc/stat: no 'cpu' line")
    return {**fields, "cpus": cpus}


def busy_cores(before: Dict[str, int], after: Dict[str, int], niced: bool = False) -> float:
    """Cores busy at nice 0 between two :func:`parse_stat` readings (0 .. cpus); with
    ``niced`` (the trainer itself runs niced, so niced work competes with it) all busy cores."""
    total = sum(after[f] - before[f] for f in _FIELDS)
    if total <= 0:
        return 0.0
    busy = sum(after[f] - before[f] for f in _BUSY + (("nice",) if niced else ()))
    return after["cpus"] * busy / total


def free_cores(busy: float, cpus: int) -> int:
    """Whole cores left free: a core counts busy from half of it on."""
    return max(0, cpus - int(busy + 0.5))


def wait_policy_for(busy: float, cpus: int, threads: int) -> str:
    """``DEFAULT`` (OpenMP's own: spin, then sleep) when a core is free for each of ``threads``,
    else ``PASSIVE`` (sleep at once)."""
    return "DEFAULT" if free_cores(busy, cpus) >= threads else "PASSIVE"


def fair_slowdown(busy: float, cpus: int, threads: int) -> float:
    """Seconds per update beside the load over those alone, at a fair share: each busy core
    counts as one more runnable thread beside the trainer's ``threads``."""
    others = cpus - free_cores(busy, cpus)
    return max(1.0, (threads + others) / max(cpus, threads))


def load_warning(busy: float, cpus: int, threads: int) -> Optional[str]:
    """One line when the trainer cannot get a core for each thread, else ``None``."""
    free = free_cores(busy, cpus)
    if free >= threads:
        return None
    return (f"load: {busy:.1f} of {cpus} cores busy before training; the trainer's {threads} "
            f"threads get {free} free core{'s' if free != 1 else ''}, so they sleep at barriers "
            f"(OMP_WAIT_POLICY=PASSIVE); expect about {fair_slowdown(busy, cpus, threads):.1f}x "
            "the seconds per update of an idle machine")


def sample_busy_cores(seconds: float = SAMPLE_SECONDS,
                      path: str = "/proc/stat") -> Optional[Tuple[float, int]]:
    """(cores busy over ``seconds`` at this process's nice value or below, cores); ``None``
    where ``path`` cannot be read (not Linux). /proc/stat only parts nice 0 from niced work,
    so a niced caller counts all niced work as busy."""
    try:
        before = parse_stat(Path(path).read_text(encoding="ascii"))
        time.sleep(seconds)
        after = parse_stat(Path(path).read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None
    return busy_cores(before, after, niced=os.nice(0) > 0), after["cpus"]


def policy_list(text: str) -> list:
    """``--wait-policy``'s argparse type: comma-separated policies (``DEFAULT,AUTO``; any case)."""
    import argparse

    policies = [part.strip().upper() for part in text.split(",")]
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad[0] or repr(bad[0])} is not a wait policy; "
                                         f"allowed: {', '.join(POLICIES)}")
    return policies


def check_policy(policy: str, flag: str = "--wait-policy") -> str:
    """``policy`` upper-cased, or a one-line error naming ``flag`` and :data:`POLICIES`."""
    from fairseq_shared.errors import FairseqSharedError

    if str(policy).upper() not in POLICIES:
        raise FairseqSharedError(f"{flag}: {policy!r} is not a wait policy; allowed: "
                                 + ", ".join(POLICIES))
    return str(policy).upper()
