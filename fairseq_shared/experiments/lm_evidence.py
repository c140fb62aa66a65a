"""The decoder-only LM runs on the English Bible corpus: a worker queue, one committed file per
run, as the translation evidence runs (:mod:`fairseq_shared.experiments.evidence`, whose
claims and commit helpers this uses).

Each item of :data:`QUEUE` is one configuration of :data:`lm_runs.LM_CONFIGS` trained with
one seed under one budget (default ``lm``). A worker takes the next item that is neither
finished nor claimed, trains it (restartable, :func:`training.train`), scores the test split
with ``fairseq-eval-lm`` and writes ``RESULTS/runs/<name>_s<seed>.json`` at once: parameters,
updates, training wall and CPU seconds, the learning curve (valid loss and perplexity at every
validation), the test perplexity and token count, the exact commands.
:mod:`fairseq_shared.experiments.lm_report` renders the tables and plot from those files.
"""

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_shared.experiments.cpu_clock import cpu_per_update, read_cpu_log
from fairseq_shared.experiments import evidence
from fairseq_shared.experiments.evidence import (item_id, learning_curve, result_path,
                                                 write_result)
from fairseq_shared.experiments.lm_runs import (LM_CONFIGS, evaluate, load_lm_budget,
                                                plan_runs, readable)
from fairseq_shared.experiments.training import log_records, train

# The main rows with two seeds first (vanilla 3 and 6 layers, cycle_rev 6/3), then ALBERT's
# attention-only rule with two seeds (the question of the issue), then the other sharings.
QUEUE: List[Tuple[str, int]] = [
    ("vanilla_L3", 1), ("cycle_rev_6_3", 1), ("vanilla_L6", 1),
    ("vanilla_L3", 2), ("cycle_rev_6_3", 2), ("vanilla_L6", 2),
    ("attn_6", 1), ("attn_6", 2), ("ffn_6", 1), ("sequence_6_3", 1), ("universal_6", 1),
]
SPLITS = ("train", "valid", "test")


def parse_queue(text: Optional[str]) -> List[Tuple[str, int]]:
    """``name:seed,name:seed`` -> items; None -> :data:`QUEUE`."""
    if not text:
        return list(QUEUE)
    items = []
    for part in text.split(","):
        name, _, seed = part.strip().partition(":")
        if name not in LM_CONFIGS:
            raise SystemExit(f"--queue: unknown configuration '{name}'; known: "
                             f"{', '.join(LM_CONFIGS)}")
        if not seed.isdigit():
            raise SystemExit(f"--queue: '{part}' needs a seed, as in {name}:1")
        items.append((name, int(seed)))
    return items


def lm_paths(data: str) -> Tuple[str, str]:
    """(corpus root, bin dir) of an LM corpus given as its root (with bin/) or its bin dir."""
    if os.path.exists(os.path.join(data, "bin", "dict.txt")):
        return data, os.path.join(data, "bin")
    if os.path.exists(os.path.join(data, "dict.txt")):
        return os.path.dirname(os.path.abspath(data)), data
    raise SystemExit(f"--data {data}: no LM corpus (bin/dict.txt); build it with python -m "
                     "fairseq_shared.data.bible_lm --bible work/bible --out work/bible_lm")


def split_sizes(bin_dir: str) -> Dict[str, Dict[str, int]]:
    """Per split: verses, scored tokens (pieces + </s>) and the longest verse, in tokens."""
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(os.path.join(bin_dir, "dict.txt"))
    out = {}
    for split in SPLITS:
        ds = data_utils.load_indexed_dataset(os.path.join(bin_dir, split), d)
        sizes = ds.sizes.copy()  # a view into the index's mmap, which dies with ``ds``
        del ds
        out[split] = {"verses": len(sizes), "tokens": int(sizes.sum()),
                      "longest": int(sizes.max())}
    return out


def check_budget_fits(sizes: Dict, budget: Dict) -> None:
    longest = max(s["longest"] for s in sizes.values())
    if longest > budget["tokens_per_sample"]:
        raise SystemExit(f"--set tokens_per_sample={budget['tokens_per_sample']}: the longest "
                         f"verse has {longest} tokens; fairseq would skip it (use at least "
                         f"{longest})")


def snapshot_corpus(data: str, results: str) -> Dict:
    """Copy the corpus's stats next to the results (``corpus.json``, with the token counts
    fairseq reads); refuse results of a different corpus."""
    root, bin_dir = lm_paths(data)
    stats_file = os.path.join(root, "stats.json")
    stats = json.loads(Path(stats_file).read_text(encoding="utf-8")) \
        if os.path.exists(stats_file) else {}
    stats["fairseq_splits"] = split_sizes(bin_dir)
    dst = Path(results) / "corpus.json"
    if dst.exists():
        old = json.loads(dst.read_text(encoding="utf-8"))
        if old.get("fairseq_splits") != stats["fairseq_splits"]:
            raise SystemExit(f"{dst} describes another corpus than {data}; use another "
                             "--results directory")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    return stats


def _ppl(loss_base2: Optional[float]) -> Optional[float]:
    return None if loss_base2 is None else 2 ** loss_base2


def run_item(name: str, seed: int, data: str, work: str, results: str,
             budget_name: str = "lm", overrides: Sequence[str] = (), progress=print) -> Dict:
    """Train (or finish) one configuration with one seed, score the test split, write its
    result file; returns the result dict."""
    _, bin_dir = lm_paths(data)
    budget = load_lm_budget(budget_name, [*overrides, f"seed={seed}"])
    sizes = split_sizes(bin_dir)
    check_budget_fits(sizes, budget)
    run = plan_runs([name], budget, bin_dir, os.path.join(work, f"runs_s{seed}"))[0]
    if run.skip_reason:
        raise RuntimeError(f"{item_id(name, seed)}: {run.skip_reason}")
    if run.state() != "done":
        train(run, progress, 1, 1, time.time())
    info = run.done_info()
    progress(f"[lm] {item_id(name, seed)}: fairseq-eval-lm on the test split")
    test = evaluate(run, "test")
    if test["tokens"] != sizes["test"]["tokens"]:
        raise RuntimeError(f"fairseq-eval-lm scored {test['tokens']} test tokens, the split "
                           f"has {sizes['test']['tokens']}")
    costs, estimated = cpu_per_update(read_cpu_log(os.path.join(run.dir, "cpu.jsonl")),
                                      info["updates"])
    curve = learning_curve(os.path.join(run.dir, "train.log"), costs)
    for point in curve:
        point["valid_ppl"] = round(2 ** point["valid_loss"], 3)
    result = {
        "name": name, "seed": seed, "label": LM_CONFIGS[name]["label"], "arch": run.arch,
        "strategy": run.strategy, "scope": run.scope, "N": run.N, "M": run.M,
        "params": run.params, "updates": info["updates"],
        "training_seconds": info["training_seconds"],
        "seconds_per_update": info["training_seconds"] / max(info["updates"], 1),
        "training_cpu_seconds": round(sum(costs), 1) if costs else None,
        "cpu_seconds_per_update": round(sum(costs) / len(costs), 4) if costs else None,
        "cpu_estimated_updates": estimated, "train_wps": info.get("train_wps"),
        "valid_loss": info.get("valid_loss"), "valid_ppl": _ppl(info.get("valid_loss")),
        "curve": curve,
        "test": {k: test[k] for k in ("loss_base2", "perplexity", "perplexity_printed",
                                      "tokens")},
        "budget": dict(budget),
        "train_command": readable(run.train_command(), "train"),
        "eval_command": test["command"],
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "data": os.path.abspath(bin_dir),
    }
    path = result_path(results, name, seed)
    write_result(path, result)
    progress(f"[lm] {item_id(name, seed)}: {info['updates']} updates, valid ppl "
             f"{result['valid_ppl']}, test ppl {test['perplexity']:.2f} -> {path}")
    return result


def lm_commit(results: str, result: Dict) -> Tuple[List[Path], str]:
    """The file of a finished LM run and the commit message."""
    name, seed = result["name"], result["seed"]
    return ([result_path(results, name, seed)],
            f"bible_lm: {item_id(name, seed)} finished (test ppl "
            f"{result['test']['perplexity']:.2f}, {result['updates']} updates)")


def work_queue(items: Sequence[Tuple[str, int]], data: str, work: str, results: str,
               budget_name: str = "lm", overrides: Sequence[str] = (),
               commit_repo: Optional[str] = None, progress=print) -> List[str]:
    """The evidence worker loop (claims, one committed file per run) over LM items."""
    return evidence.work_queue(items, data, work, results, budget_name, overrides,
                               commit_repo, progress, run=run_item, to_commit=lm_commit,
                               tag="lm")


# ---------------------------------------------------------------------------- rates
def estimate_minutes(items: Sequence[Tuple[str, int]], max_update: int, rates: List[Dict],
                     key: str = "cpu_s_per_update") -> float:
    """Training worker-minutes of ``items`` at measured rates (``rates.json``): 3-layer rows at
    vanilla 3's rate, the rest (6 layers: the same compute whatever they share) at vanilla 6's."""
    by_name = {r["name"]: r[key] for r in rates}
    return sum(by_name["vanilla_L3" if LM_CONFIGS[name]["N"] <= 3 else "vanilla_L6"]
               for name, _ in items) * max_update / 60


def measure_rate(name: str, data: str, work: str, updates: int = 40, interval: int = 10,
                 progress=print) -> Dict:
    """Seconds per update of ``name`` under the ``lm`` budget, from a fresh ``updates``-update
    run: wall (fairseq's train_wall) and CPU seconds (the process tree) per update over the
    logged intervals after the first one (which holds start-up and the first batches)."""
    _, bin_dir = lm_paths(data)
    budget = load_lm_budget("lm", [f"max_update={updates}", f"log_interval={interval}",
                                   "save_interval_updates=0"])
    run = plan_runs([name], budget, bin_dir, os.path.join(work, "rates"))[0]
    if run.skip_reason:
        raise RuntimeError(f"{name}: {run.skip_reason}")
    shutil.rmtree(run.dir, ignore_errors=True)
    t0 = time.time()
    train(run, progress, 1, 1, t0)
    wall = {int(float(r["num_updates"])): float(r["train_wall"])
            for kind, r in log_records(os.path.join(run.dir, "train.log"))
            if kind == "train_inner" and "train_wall" in r}
    cpu = read_cpu_log(os.path.join(run.dir, "cpu.jsonl"))
    cpu_at = {int(r["update"]): float(r["cpu"]) for r in cpu}
    first, last = interval, max(wall)
    timed = last - first
    return {"name": name, "params": run.params, "updates_timed": timed,
            "wall_s_per_update": sum(s for u, s in wall.items() if u > first) / timed,
            "cpu_s_per_update": (cpu_at[last] - cpu_at[first]) / timed
            if first in cpu_at and last in cpu_at else math.nan,
            "run_wall_s": round(time.time() - t0, 1), "budget": budget,
            "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
