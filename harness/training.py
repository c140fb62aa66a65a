"""Training one :class:`~harness.runs.Run` with fairseq-train: restartable
(a stale run is moved aside, an interrupted one resumes from ``checkpoint_last.pt``), with
progress lines and an ETA, and fairseq's JSON log parsed into ``done.json``."""

import ctypes
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from harness import child, cpu_load
from harness.cpu_clock import CpuLog, cumulative_cpu
from harness.queue import write_result
from harness.runs import Run

_PR_SET_PDEATHSIG = 1
_JSON_RE = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")


def _json_record(line: str) -> Optional[Tuple[str, Dict]]:
    """(train_inner / train / valid, record) of a JSON line of fairseq's log, else None."""
    m = _JSON_RE.search(line)
    try:
        return (m.group(1), json.loads(m.group(2))) if m else None
    except json.JSONDecodeError:
        return None


def log_records(path: str):
    """:func:`_json_record` of every line of a fairseq training log (all attempts appended; a
    missing log has none)."""
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            yield from filter(None, map(_json_record, f))


def parse_train_log(records: Sequence[Tuple[str, Dict]]) -> Dict:
    """Training statistics from fairseq's JSON log lines (:func:`log_records`, all attempts
    appended)."""
    inner, epochs, valids = [], [], []
    for kind, rec in records:
        {"train_inner": inner, "train": epochs, "valid": valids}[kind].append(rec)
    wps = [float(r["wps"]) for r in inner[1:] if "wps" in r] or \
          [float(r["wps"]) for r in inner if "wps" in r] or \
          [float(r["train_wps"]) for r in epochs if "train_wps" in r]
    ups = [float(r["ups"]) for r in inner[1:] if "ups" in r] or \
          [float(r["train_ups"]) for r in epochs if "train_ups" in r]
    return {"train_wps": statistics.median(wps) if wps else None,
            "train_ups": statistics.median(ups) if ups else None,
            "updates": max((int(float(r.get("num_updates", r.get("train_num_updates", 0))))
                            for r in inner + epochs), default=0),
            "valid_loss": float(valids[-1]["valid_loss"]) if valids else None,
            "valid_nll_loss": float(valids[-1]["valid_nll_loss"]) if valids and
            "valid_nll_loss" in valids[-1] else None}


def learning_curve(log, cpu_costs: Sequence[float] = ()) -> List[Dict]:
    """Valid loss at every validation of a training log (its path, or its
    :func:`log_records` read once), with the training seconds spent up to that update.

    fairseq's ``train_inner`` lines carry ``train_wall``, the seconds of their own logging
    interval (its cumulative ``wall`` restarts on resume), so the training seconds at update u
    are the sum over the intervals that end at or before u; an interval logged twice (a killed
    attempt that was resumed from an earlier checkpoint) counts once, with its last value.
    ``cpu_costs`` (:func:`~harness.cpu_clock.cpu_per_update`) adds the
    CPU seconds spent up to each point (``train_cpu_seconds``, :func:`with_cpu`)."""
    intervals, points = {}, {}
    for kind, rec in (log_records(log) if isinstance(log, str) else log):
        if kind == "train_inner" and "train_wall" in rec:
            intervals[int(float(rec["num_updates"]))] = float(rec["train_wall"])
        elif kind == "valid":
            point = {"update": int(float(rec["valid_num_updates"])),
                     "valid_loss": float(rec["valid_loss"])}
            if "valid_nll_loss" in rec:
                point["valid_nll_loss"] = float(rec["valid_nll_loss"])
            points[point["update"]] = point
    for u, point in points.items():
        point["train_seconds"] = sum(s for end, s in intervals.items() if end <= u)
    return with_cpu([points[u] for u in sorted(points)], cpu_costs)


def with_cpu(curve: Sequence[Dict], cpu_costs: Sequence[float]) -> List[Dict]:
    """``curve``'s points with the CPU seconds spent up to each (where ``cpu_costs`` reach)."""
    return [dict(p, train_cpu_seconds=round(cumulative_cpu(cpu_costs, p["update"]), 2))
            if len(cpu_costs) >= p["update"] else dict(p) for p in curve]


def checkpoint_progress(path: str) -> Dict:
    """Updates and training seconds stored in a fairseq checkpoint (0 if unreadable)."""
    try:
        from fairseq import checkpoint_utils

        import fairseq_shared  # noqa: F401  (compat: safe loading of fairseq checkpoints)

        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        hist = state.get("optimizer_history") or [{}]
        extra = state.get("extra_state") or {}
        return {"updates": int(hist[-1].get("num_updates", 0)),
                "seconds": float(extra.get("previous_training_time", 0.0))}
    except Exception:  # noqa: BLE001  a torn or foreign file: let fairseq decide
        return {"updates": 0, "seconds": 0.0}


def _write_done(run: Run, key: str, t0: float, log_path: str, note: str = "") -> Dict:
    """done.json of a chunk of training; the log is parsed and the checkpoint read once here,
    and the run holds what they say (its updates and curve) for the milestone that follows."""
    records = list(log_records(log_path))
    stats = parse_train_log(records)
    ck = checkpoint_progress(run.checkpoint)
    stats["updates"] = max(stats["updates"], ck["updates"])
    info = {"key": key, "checkpoint_updates": ck["updates"], "name": run.name, "params": run.params, "limits": run.limits(),
            "wall_seconds_last_attempt": time.time() - t0, "training_seconds": ck["seconds"],
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "note": note, **stats}
    write_result(Path(run.dir) / "done.json", info)
    run.updates, run.curve = ck["updates"], learning_curve(records)
    return info


POLL_SECONDS = 0.2  # how often the log the child writes is read for progress and CPU time


def _die_with(parent: int):
    """preexec_fn: the child gets SIGKILL when ``parent`` dies (Linux ``PR_SET_PDEATHSIG``)."""
    def preexec():
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # not Linux: the pid file still lets a taker kill it
            pass
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
    return preexec


class _Progress:
    """Reads what the child appended to its log: CPU time at each logged update, progress
    lines with an ETA, valid losses."""

    def __init__(self, run: Run, progress, t0: float, cpu_log: CpuLog):
        self.run, self.progress, self.t0, self.cpu_log = run, progress, t0, cpu_log
        self.last_print, self.first_update, self.partial = 0.0, None, b""

    def read(self, path: str, offset: int) -> int:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()  # a line the child has not finished writing
        for line in lines:
            self.line(line.decode("utf-8", errors="replace"))
        return offset + len(data)

    def line(self, line: str) -> None:
        kind, rec = _json_record(line) or (None, None)
        run, tag = self.run, f"[train] {self.run.name}"
        if kind == "train_inner":
            upd = int(float(rec.get("num_updates", 0)))
            self.cpu_log.write(upd)
            now = time.time()
            if self.first_update is None:
                self.first_update = (upd, now)
            if now - self.last_print > 20 or upd >= run.max_update:
                self.last_print = now
                u0, t_u0 = self.first_update
                rate = (upd - u0) / (now - t_u0) if now > t_u0 and upd > u0 else None
                eta = f"{(run.max_update - upd) / rate / 60:.1f} min" if rate else "?"
                self.progress(f"{tag}: update {upd}/{run.max_update}, loss {rec.get('loss')}, "
                              f"{rec.get('wps')} tok/s, elapsed {(now - self.t0) / 60:.1f} min, "
                              f"ETA {eta}")
        elif kind == "valid":
            self.progress(f"{tag}: valid loss {rec.get('valid_loss')} at update "
                          f"{rec.get('valid_num_updates')}")


def training_env(threads: int, environ=None, policy: str = "DEFAULT") -> dict:
    """The trainer's environment: ``threads`` OpenMP/MKL threads that wait at barriers by a
    decided ``policy`` (:func:`wait_policy`; ``DEFAULT``: OpenMP's own, the variable unset).
    The policy changes no number the run computes, only how its threads wait."""
    env = dict(os.environ if environ is None else environ, OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    env.pop("OMP_WAIT_POLICY", None)
    return env if policy == "DEFAULT" else dict(env, OMP_WAIT_POLICY=policy)


def start_header(policy: str, warning: Optional[str], cmd: Sequence[str]) -> str:
    """The one line each start of fairseq-train writes to train.log: the resume tests count
    them, and ``train_rate.logged_policy`` reads the wait policy from the last."""
    return (f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} OMP_WAIT_POLICY {policy}"
            f"{' (' + warning + ')' if warning else ''}: {' '.join(cmd)}\n")


def wait_policy(threads: int, requested: Optional[str] = None, environ=None,
                sample=cpu_load.sample_busy_cores) -> Tuple[str, Optional[str]]:
    """(the trainer's decided wait policy, a load warning or ``None``): ``requested``, else the
    caller's own ``OMP_WAIT_POLICY``, else ``AUTO``, which samples the machine's load
    (:mod:`~harness.cpu_load`)."""
    environ = os.environ if environ is None else environ
    flag = "--wait-policy" if requested else "OMP_WAIT_POLICY"
    policy = cpu_load.check_policy(requested or environ.get("OMP_WAIT_POLICY") or "AUTO", flag)
    load = sample() if policy == "AUTO" else None
    if load is None:  # a decided policy, or no /proc/stat (not Linux): OpenMP's default
        return ("DEFAULT" if policy == "AUTO" else policy), None
    return cpu_load.wait_policy_for(*load, threads), cpu_load.load_warning(*load, threads)


def train(run: Run, progress, policy: Optional[str] = None) -> Dict:
    """Train (or resume) one configuration; returns its done.json content. A fairseq-train
    child left by a killed worker (its pid in the run directory) is killed first. ``policy``:
    the OpenMP wait policy (:func:`wait_policy`; default ``AUTO``)."""
    child.kill_orphan(run.dir)
    if run.state() == "stale":
        stale = f"{run.dir}.stale-{time.strftime('%Y%m%d-%H%M%S')}"
        progress(f"[train] {run.name}: training command changed; moving the old run to {stale}")
        shutil.move(run.dir, stale)
    os.makedirs(run.dir, exist_ok=True)
    cmd, key = run.train_command(), run.key()
    write_result(Path(run.dir) / "plan.json", {"key": key, "command": cmd, "config": run.config,
                                               "budget": run.budget, "params": run.params})
    log_path = os.path.join(run.dir, "train.log")
    resumed = os.path.exists(run.checkpoint)
    start_update = 0
    if resumed:
        # killed after its final checkpoint but before done.json: fairseq would run one
        # more update on restart, so finish here instead
        ck = checkpoint_progress(run.checkpoint)
        start_update = ck["updates"]
        max_min = run.budget.get("max_minutes")
        if ck["updates"] >= run.max_update or (max_min and ck["seconds"] >= 60 * max_min):
            info = _write_done(run, key, time.time(), log_path,
                               note="complete in checkpoint_last.pt")
            progress(f"[train] {run.name}: already complete in checkpoint_last.pt "
                     f"({ck['updates']} updates); marked done")
            return info
    progress(f"[train] {run.name}: {'resuming from checkpoint_last.pt' if resumed else 'starting'}"
             f" (N={run.N}, M={run.M}, {run.strategy}/{run.scope}, "
             f"{run.params:,} params, max {run.budget['max_update']} updates)")
    decided, warning = wait_policy(run.budget["threads"], policy)
    env = training_env(run.budget["threads"], policy=decided)
    if warning:
        progress(f"[train] {run.name}: {warning}")
    t0 = time.time()
    with open(log_path, "ab") as logf:
        logf.write(start_header(decided, warning, cmd).encode())
        offset = logf.tell()
        # the child writes its own log: what it did survives this process
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=_die_with(os.getpid()), close_fds=True)
    child.record(run.dir, proc.pid)
    cpu_log = CpuLog(run.dir, proc.pid, time.strftime("%Y%m%d-%H%M%S"), start_update)
    watch = _Progress(run, progress, t0, cpu_log)
    try:
        rc = None
        while rc is None:
            rc = proc.poll()
            offset = watch.read(log_path, offset)
            if rc is None:
                time.sleep(POLL_SECONDS)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        child.forget(run.dir, proc.pid)
    if rc != 0 or not os.path.exists(run.checkpoint):
        tail = "".join(open(log_path, encoding="utf-8", errors="replace").readlines()[-15:])
        raise RuntimeError(f"fairseq-train failed for {run.name} (exit {rc}); see {log_path}:\n{tail}")
    info = _write_done(run, key, t0, log_path)
    progress(f"[train] {run.name}: done, {info['updates']} updates, "
             f"{info['train_wps']} tok/s (median), valid loss {info['valid_loss']}")
    return info
