"""The fairseq-train child of a run, recorded in its run directory (``train.pid``: pid and
kernel start time), so that whoever takes the run over after its worker died can kill a child
that outlived it (where ``PR_SET_PDEATHSIG`` is not available or has not fired yet) before
training into the same directory."""

import os
import signal
import time
from pathlib import Path
from typing import List, Optional

from harness.queue import read_json, write_result

PID_FILE = "train.pid"


def stat_fields(pid: int) -> Optional[List[str]]:
    """The fields of ``/proc/PID/stat`` after ``pid (comm)`` (None if gone, or no /proc): start
    time here, CPU time in :mod:`~harness.cpu_clock`."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def start_time(pid: int) -> Optional[int]:
    """The kernel's start time of ``pid`` (clock ticks since boot; None if it is gone), which
    tells a live process from a later one that reused its pid."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == "Z":  # exited, not yet reaped
        return None
    return int(fields[19])


def record(run_dir: str, pid: int) -> None:
    write_result(Path(run_dir) / PID_FILE, {"pid": pid, "start": start_time(pid)})


def forget(run_dir: str, pid: int) -> None:
    path = Path(run_dir) / PID_FILE
    if (read_json(path) or {}).get("pid") == pid:
        path.unlink(missing_ok=True)


def kill_orphan(run_dir: str, timeout: float = 30.0) -> Optional[int]:
    """Kill the recorded child of ``run_dir`` if it still runs (the same process: same pid and
    start time) and wait until it is gone; returns its pid, or None if there was none."""
    path = Path(run_dir) / PID_FILE
    rec = read_json(path)
    if rec is None:
        return None
    pid = int(rec.get("pid") or 0)
    alive = pid > 0 and start_time(pid) is not None and start_time(pid) == rec.get("start")
    if alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.time() + timeout
        while start_time(pid) == rec.get("start") and time.time() < deadline:
            time.sleep(0.05)
    path.unlink()
    return pid if alive else None
