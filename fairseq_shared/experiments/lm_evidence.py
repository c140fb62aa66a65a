"""The decoder-only LM runs on the English Bible corpus: a worker queue, one committed file per
run, a declaration on the run queue (:mod:`fairseq_shared.experiments.queue`), as the translation
evidence runs.

Each item of :data:`QUEUE` is one configuration of :data:`lm_runs.LM_CONFIGS` trained with
one seed under one budget (default ``lm``). A worker takes the next item that is neither
finished nor claimed, trains it (restartable, :func:`training.train`), scores the test split
with ``fairseq-eval-lm`` and writes ``RESULTS/runs/<name>_s<seed>.json`` at once: parameters,
updates, training wall and CPU seconds, the learning curve (valid loss and perplexity at every
validation), the test perplexity and token count, the exact commands.
:mod:`fairseq_shared.experiments.lm_report` renders the tables and plot from those files.
"""

import functools
import json
import os
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_shared.experiments import queue
from fairseq_shared.experiments.lm_runs import (LM_CONFIGS, evaluate, load_lm_budget,
                                                plan_runs, readable)
from fairseq_shared.experiments.run_record import record_run

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
    return queue.parse_queue(text, QUEUE, LM_CONFIGS)


def lm_paths(data: str) -> Tuple[str, str]:
    """(corpus root, bin dir) of an LM corpus given as its root (with bin/) or its bin dir."""
    if os.path.exists(os.path.join(data, "bin", "dict.txt")):
        return data, os.path.join(data, "bin")
    if os.path.exists(os.path.join(data, "dict.txt")):
        return os.path.dirname(os.path.abspath(data)), data
    raise SystemExit(f"--data {data}: no LM corpus (bin/dict.txt); build it with python -m "
                     "fairseq_shared.cli.bible_lm --bible work/bible --out work/bible_lm")


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


def snapshot_corpus(data: str, results: str) -> List[Path]:
    """Copy the corpus's stats next to the results (``corpus.json``, with the token counts
    fairseq reads); refuse results of a different corpus. -> the snapshot's file."""
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
    queue.write_result(dst, stats)
    return [dst]


def _ppl(loss_base2: Optional[float]) -> Optional[float]:
    return None if loss_base2 is None else 2 ** loss_base2


def eval_lm_evaluation(sizes: Dict, progress=print):
    """The ``evaluate`` hook of LM runs: fairseq-eval-lm on the test split (every token of it
    scored, or an error), perplexities of the valid curve."""
    def evaluate_run(run, result: Dict) -> Dict:
        progress(f"[lm] {run.name}: fairseq-eval-lm on the test split")
        test = evaluate(run, "test")
        if test["tokens"] != sizes["test"]["tokens"]:
            raise RuntimeError(f"fairseq-eval-lm scored {test['tokens']} test tokens, the split "
                               f"has {sizes['test']['tokens']}")
        for point in result["curve"]:
            point["valid_ppl"] = round(2 ** point["valid_loss"], 3)
        return {"valid_ppl": _ppl(result["valid_loss"]),
                "test": {k: test[k] for k in ("loss_base2", "perplexity", "perplexity_printed",
                                              "tokens")},
                "eval_command": test["command"]}
    return evaluate_run


def run_item(name: str, seed: int, data: str, work: str, results: str,
             budget_name: str = "lm", overrides: Sequence[str] = (), progress=print) -> Dict:
    """Train (or finish) one configuration with one seed and score the test split; returns
    the result dict (the queue writes it)."""
    _, bin_dir = lm_paths(data)
    budget = load_lm_budget(budget_name, [*overrides, f"seed={seed}"])
    sizes = split_sizes(bin_dir)
    check_budget_fits(sizes, budget)
    run = plan_runs([name], budget, bin_dir, os.path.join(work, f"runs_s{seed}"))[0]
    item = queue.Item(name, seed)
    result = record_run(run, item, LM_CONFIGS[name]["label"],
                        eval_lm_evaluation(sizes, progress), progress,
                        command=readable(run.train_command(), "train"))
    result["data"] = os.path.abspath(bin_dir)
    progress(f"[lm] {item.id}: {result['updates']} updates, valid ppl "
             f"{result['valid_ppl']}, test ppl {result['test']['perplexity']:.2f}")
    return result


def lm_commit(item: queue.Item, result: Dict, ctx: queue.Context) -> Tuple[List[Path], str]:
    """A finished LM run commits its result file only; the message."""
    test = result.get("test", {})
    return [], (f"bible_lm: {item.id} finished (test ppl {test['perplexity']:.2f}, "
                f"{result['updates']} updates)" if test else f"bible_lm: {item.id} finished")


SUITE = queue.Suite("lm", run=queue.item_runner(run_item), commit_files=lm_commit)
#: work_queue(items, data, work, results, budget, overrides=(), commit_repo=None, progress=print)
work_queue = functools.partial(queue.work_pairs, SUITE)


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
    run, by the one rate meter (:func:`train_rate.measure_run`): wall (the median logged
    interval) and CPU seconds (the process tree) per update after the first logged interval
    (which holds start-up and the first batches)."""
    from fairseq_shared.experiments.train_rate import measure_run

    _, bin_dir = lm_paths(data)
    budget = load_lm_budget("lm", [f"max_update={updates}", f"log_interval={interval}",
                                   "save_interval_updates=0"])
    run = plan_runs([name], budget, bin_dir, os.path.join(work, "rates"))[0]
    if run.skip_reason:
        raise RuntimeError(f"{name}: {run.skip_reason}")
    rates = measure_run(run, progress=progress)
    return {"name": name, "params": run.params, "updates_timed": rates["steady_updates"],
            "wall_s_per_update": rates["steady_s_per_update"],
            "cpu_s_per_update": rates["steady_cpu_s_per_update"],
            "wait_policy": rates["wait_policy"], "run_wall_s": rates["process_wall_s"],
            "budget": budget, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
