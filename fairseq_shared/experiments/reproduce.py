"""The whole reproduction as one library call: plan, train every configuration, decode them in
one interleaved timing run, tabulate (``python -m fairseq_shared.cli.reproduce`` is its
command line)."""

import os
import time
from typing import Dict, List, Optional

from fairseq_shared.experiments.decode import decode_all, heldout_baseline
from fairseq_shared.experiments.runs import make_plan, print_plan
from fairseq_shared.experiments.tables import collect_rows, write_results
from fairseq_shared.experiments.training import train

def reproduce(data: str, out: str, budget: Dict, configs: List[Dict], dry_run=False,
              progress=None, skip_decode=False, runs_dir: Optional[str] = None) -> Dict:
    """The whole pipeline as a library call; returns ``{"rows", "decode", "paths", "runs"}``."""
    t_overall = time.time()

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        (progress or (lambda m: print(m, flush=True)))(line)
        if not dry_run:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "progress.log"), "a", encoding="utf-8") as f:
                f.write(line + "\n")

    log(f"[plan] data {data}, out {out}, {len(configs)} configurations")
    runs = make_plan(configs, budget, data, out, runs_dir=runs_dir)
    print_plan(runs, budget, log)
    if dry_run:
        return {"runs": runs, "rows": collect_rows(runs, None), "decode": None, "paths": {}}
    todo = [r for r in runs if not r.skip_reason]
    cost_done, time_done = 0.0, 0.0
    total_cost = sum(r.layer_cost() for r in todo if r.state() != "done")
    for k, r in enumerate(todo, 1):
        if r.state() == "done":
            log(f"[train {k}/{len(todo)}] {r.name}: already trained ({r.done_info()['updates']} "
                "updates); skipped")
            continue
        if budget.get("equal_updates") and r.name != "vanilla":
            base = next((v for v in runs if v.name == "vanilla"), None)
            reached = (base.done_info() or {}).get("updates") if base else None
            if reached and reached < r.max_update:
                log(f"[train {k}/{len(todo)}] {r.name}: max_update {r.max_update} -> {reached} "
                    "(equal_updates: what vanilla reached within its time cap)")
                r.max_update = reached
                if r.state() == "done":
                    log(f"[train {k}/{len(todo)}] {r.name}: already trained; skipped")
                    continue
        t0 = time.time()
        train(r, log, k, len(todo), t_overall)
        cost_done += r.layer_cost()
        time_done += time.time() - t0
        left = total_cost - cost_done
        if left > 0:
            log(f"[train] {k}/{len(todo)} done; elapsed {(time.time() - t_overall) / 60:.1f} min, "
                f"training ETA ~{time_done / cost_done * left / 60:.1f} min (by layers run)")
    decode = None
    if not skip_decode and todo:
        decode = decode_all(runs, budget, data, out, log)
    rows = collect_rows(runs, decode)
    lookup = heldout_baseline(data, budget, decode, out, rows)
    paths = write_results(rows, budget, decode, out, lookup)
    log(f"[done] {', '.join(paths.values())}; total {(time.time() - t_overall) / 60:.1f} min")
    return {"runs": runs, "rows": rows, "decode": decode, "paths": paths, "lookup": lookup}
