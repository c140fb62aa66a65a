"""Long runs in stages: train to each milestone, evaluate it, write and commit its files at
once, continue; optionally stop early from the valid curve; a final stage can average the last
interval checkpoints (:func:`average_last`).

fairseq resumes from ``checkpoint_last.pt`` when ``--max-update`` is raised (the run's key
leaves the limit out), and the inverse-sqrt schedule has no horizon, so training to 1,000,
then to 2,000 updates is the 2,000-update run. A stopped worker loses at most the updates
since the last checkpoint, never a finished milestone: the next one finds the milestone's file
and goes on.

Early stop (``patience`` > 0): counted in validations at multiples of the checkpoint interval
(``save_interval_updates``; fairseq's epoch-end validations are left out, so that every
counted point has a kept checkpoint), from the run directory's log, so it survives restarts.
The run stops at the first counted validation that is ``patience`` validations after the best
one. Training runs in chunks that end where a stop could first happen (the best update plus
``patience`` intervals, or the next milestone), so it never trains past the stop.
"""

import math
import os
from typing import Callable, Dict, List, Optional, Sequence

from harness.run_record import checkpoint_updates, run_curve, train_run


def parse_milestones(value, max_update: int) -> List[int]:
    """The ``milestones`` budget key (a list, or ``"1000,2000"``) as increasing updates."""
    if isinstance(value, int):
        value = [value]
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise SystemExit(f"--set milestones={value}: expected updates such as "
                             "1000,2000,4000") from None
    out = [int(v) for v in value]
    if not out or out != sorted(set(out)) or out[0] <= 0 or out[-1] > max_update:
        raise SystemExit(f"milestones {value}: expected increasing positive updates up to "
                         f"max_update={max_update}")
    return out


def counted(curve: Sequence[Dict], interval: int) -> List[Dict]:
    return [p for p in curve if interval and p["update"] % interval == 0]


def early_stop(curve: Sequence[Dict], patience: int, interval: int) -> Optional[int]:
    """The update at which ``patience`` counted validations have passed without a new best
    valid loss (None: not stopped)."""
    if not patience:
        return None
    best, best_i = math.inf, -1
    for i, point in enumerate(counted(curve, interval)):
        if point["valid_loss"] < best:
            best, best_i = point["valid_loss"], i
        elif i - best_i >= patience:
            return point["update"]
    return None


def next_check(curve: Sequence[Dict], patience: int, interval: int) -> Optional[int]:
    """The first update at which the run could stop early, given the curve so far."""
    if not patience:
        return None
    points = counted(curve, interval)
    if not points:
        return patience * interval
    best = min(points, key=lambda p: (p["valid_loss"], p["update"]))
    return max(best["update"] + patience * interval, points[-1]["update"] + interval)


def train_to(run, target: int, patience: int, progress) -> Optional[int]:
    """Train ``run`` up to ``target`` updates, or to its early stop; returns the stop update
    (None: ``target`` was reached without stopping)."""
    interval = int(run.budget.get("save_interval_updates") or 0)
    while True:  # the run holds its updates and curve: each read once per chunk
        curve = run_curve(run)
        stop = early_stop(curve, patience, interval)
        if stop is not None:
            return stop
        if checkpoint_updates(run) >= target:
            return None
        check = next_check(curve, patience, interval)
        run.max_update = min(target, check) if check else target
        train_run(run, run.name, progress)
        if checkpoint_updates(run) < run.max_update:
            raise RuntimeError(f"{run.name}: training stopped at update "
                               f"{checkpoint_updates(run)} before {run.max_update}")


def run_stages(run, milestones: Sequence[int], patience: int,
               at_milestone: Callable[[int], Dict], done: Callable[[int], Optional[Dict]],
               progress=print) -> Dict:
    """Train ``run`` through ``milestones``; ``at_milestone(k)`` evaluates the checkpoint at
    ``k`` updates and writes (and commits) its files, unless ``done(k)`` already holds them.
    Returns {"milestones": [their records], "stopped_at": the early stop's update or None};
    ``run.max_update`` is left at the last update trained."""
    records, stopped = [], None
    for k in milestones:
        record = done(k)
        if record is None:
            stopped = train_to(run, k, patience, progress)
            if checkpoint_updates(run) >= k:  # reached (a stop exactly at k included)
                record = at_milestone(k)
        if record is not None:
            records.append(record)
        if stopped is not None:
            progress(f"[stages] {run.name}: early stop at update {stopped} (patience "
                     f"{patience} validations)")
            break
    run.max_update = max(checkpoint_updates(run), 1)
    return {"milestones": records, "stopped_at": stopped}


def average_last(run_dir: str, n: int, upto: int, out: str) -> List[str]:
    """Average the ``n`` newest interval checkpoints at or before update ``upto`` into
    ``out`` (:mod:`fairseq_shared.tools.averaging`); returns their paths."""
    from fairseq_shared import checkpoint_io
    from fairseq_shared.tools.averaging import average_checkpoints, last_n_checkpoints

    inputs = last_n_checkpoints(run_dir, n, update_based=True, upper_bound=upto)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    checkpoint_io.save(average_checkpoints(inputs), out)
    return inputs


def keep_weights(checkpoint: str, out: str) -> str:
    """``checkpoint`` without its optimizer state (what fairseq's ``--no-save-optimizer-state``
    leaves out): a decodable model a third of the size, for committing beside its record."""
    from fairseq_shared import checkpoint_io

    state = checkpoint_io.load_raw(checkpoint)
    state.pop("last_optimizer_state", None)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    return checkpoint_io.save(state, out)
