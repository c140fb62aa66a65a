"""The decoder-only LM runs on the English Bible corpus: the configurations and budgets, one
run's commands, and a worker queue with one committed file per run, a declaration on the run
queue (:mod:`fairseq_shared.experiments.queue`), as the translation runs.

Vanilla rows are fairseq's own ``transformer_lm``; the shared rows are the registered
``transformer_lm_*`` families with the decoder's sharing given explicitly
(``--decoder-share-strategy/--decoder-unique-layers/--decoder-share-scope``). An
:class:`LMRun` is a :class:`~fairseq_shared.experiments.runs.Run` with the LM task's data and
criterion flags, so that :func:`~fairseq_shared.experiments.training.train` trains and resumes
it, and :func:`~fairseq_shared.experiments.runs.make_plan` counts its parameters.

Each item of :data:`QUEUE` is one configuration of :data:`LM_CONFIGS` trained with
one seed under one budget (default ``lm``). A worker takes the next item that is neither
finished nor claimed, trains it (restartable, :func:`training.train`), scores the test split
with ``fairseq-eval-lm`` and writes ``RESULTS/runs/<name>_s<seed>.json`` at once: parameters,
updates, training wall and CPU seconds, the learning curve (valid loss and perplexity at every
validation), the test perplexity and token count, the exact commands.
:mod:`fairseq_shared.experiments.lm_report` renders the tables and plot from those files.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_shared.experiments import queue
from fairseq_shared.experiments.run_record import record_run
from fairseq_shared.experiments.runs import Run, make_plan, plan_run
from fairseq_shared.fairseq_commands import fairseq_command, fairseq_tool
from fairseq_shared.sharing.assignment import M_STRATEGIES

# N, M: decoder layers and parameter sets. Equal compute is N = 6 for every shared row, so
# each is compared with vanilla at 6 layers (same compute) and at 3 (same parameters as the
# 6/3 rows); attention-only and FFN-only use N = 6 for that reason too.
LM_CONFIGS: Dict[str, Dict] = {c["name"]: c for c in [
    dict(name="vanilla_L3", label="Vanilla, 3 layers", arch="transformer_lm", N=3, M=3),
    dict(name="vanilla_L6", label="Vanilla, 6 layers", arch="transformer_lm", N=6, M=6),
    dict(name="cycle_rev_6_3", label="Cycle (rev), 6 layers / 3 sets",
         arch="transformer_lm_cycle_rev", N=6, M=3, strategy="cycle_rev", scope="all"),
    dict(name="sequence_6_3", label="Sequence, 6 layers / 3 sets",
         arch="transformer_lm_sequence", N=6, M=3, strategy="sequence", scope="all"),
    dict(name="universal_6", label="Universal, 6 layers / 1 set",
         arch="transformer_lm_universal", N=6, M=1, strategy="universal", scope="all"),
    # ALBERT's rule: the attention projections shared by all 6 layers, each its own FFN
    dict(name="attn_6", label="Attention only (ALBERT), 6 layers",
         arch="transformer_lm_attn_shared", N=6, M=1, strategy="universal", scope="attn"),
    dict(name="ffn_6", label="FFN only, 6 layers",
         arch="transformer_lm_universal", N=6, M=1, strategy="universal", scope="ffn"),
]}

# The budget of the LM runs on this project's 2-core CPU machine (two workers, one thread
# each); the measured rates and the arithmetic behind max_update are in
# results/bible_lm/README.md. tokens_per_sample covers the longest verse (113 pieces + </s>),
# so that no verse is split or skipped (fairseq-eval-lm silently skips longer samples).
LM_BUDGETS: Dict[str, Dict] = {
    "lm": dict(dim=128, ffn=512, heads=4, max_update=1600, max_tokens=2048,
               tokens_per_sample=128, lr=0.002, warmup_updates=150, dropout=0.1,
               threads=1, save_interval_updates=100, log_interval=25, seed=1,
               max_minutes=None, eval_max_tokens=4096, device="cpu"),
    # for tests: seconds per run
    "tiny": dict(dim=16, ffn=32, heads=2, max_update=5, max_tokens=256,
                 tokens_per_sample=64, lr=0.005, warmup_updates=2, dropout=0.1,
                 threads=1, save_interval_updates=0, log_interval=1, seed=1,
                 max_minutes=None, eval_max_tokens=1024, device="cpu"),
}


def load_lm_budget(name: str, overrides=()) -> Dict:
    from fairseq_shared.experiments.configs import with_overrides

    if name not in LM_BUDGETS:
        raise SystemExit(f"--budget: unknown '{name}'; allowed: {', '.join(LM_BUDGETS)}")
    budget = dict(LM_BUDGETS[name], name=name, L=3)  # L: Run's depth unit (unused here)
    return with_overrides(budget, overrides, f"--budget {name}")


class LMRun(Run):
    """One LM configuration under one budget (``data`` is the binarized LM corpus)."""

    def model_flags(self) -> List[str]:
        b = self.budget
        flags = ["--arch", self.arch, "--decoder-layers", str(self.N),
                 # fairseq's LM dataclass defaults input/output dims to 512, not to the
                 # embedding dim: unset, a d=128 transformer_lm gets 512-d projections
                 "--decoder-embed-dim", str(b["dim"]), "--decoder-input-dim", str(b["dim"]),
                 "--decoder-output-dim", str(b["dim"]), "--decoder-ffn-embed-dim", str(b["ffn"]),
                 "--decoder-attention-heads", str(b["heads"]),
                 "--decoder-normalize-before", "--share-decoder-input-output-embed"]
        if self.arch != "transformer_lm":
            flags += ["--decoder-share-strategy", self.strategy,
                      "--decoder-share-scope", self.scope]
            if self.strategy in M_STRATEGIES:
                flags += ["--decoder-unique-layers", str(self.M)]
        return flags

    def task_flags(self) -> List[str]:
        return ["--task", "language_modeling", "--sample-break-mode", "eos",
                "--tokens-per-sample", str(self.budget["tokens_per_sample"])]

    def data_flags(self) -> List[str]:
        return [self.data, *self.task_flags()]

    def criterion_flags(self) -> List[str]:
        return ["--criterion", "cross_entropy"]

    def embedding_flags(self) -> List[str]:
        return []

    def eval_command(self, split: str = "test") -> List[str]:
        """fairseq-eval-lm on ``split``: every verse on its own (``--sample-break-mode eos``),
        every token scored, ``</s>`` included."""
        cmd = fairseq_command(
            "eval_lm", self.data, "--path", self.checkpoint, "--gen-subset", split,
            *self.task_flags(), "--max-tokens", str(self.budget["eval_max_tokens"]),
            "--num-workers", "0", "--log-format", "simple", "--seed", "1")
        return cmd + (["--cpu"] if self.budget.get("device", "cpu") == "cpu" else [])


_EVAL_RE = re.compile(r"Loss \(base 2\): ([0-9.]+), Perplexity: ([0-9.]+)")
_COUNT_RE = re.compile(r"Evaluated ([0-9,]+) tokens")


def parse_eval_output(text: str) -> Optional[Dict]:
    """The loss (bits per token), perplexity and token count of fairseq-eval-lm's output."""
    m, c = _EVAL_RE.search(text), _COUNT_RE.search(text)
    if not m or not c:
        return None
    loss = float(m.group(1))
    return {"loss_base2": loss, "perplexity": 2 ** loss,
            "perplexity_printed": float(m.group(2)), "tokens": int(c.group(1).replace(",", ""))}


def evaluate(run: LMRun, split: str = "test") -> Dict:
    """Run fairseq-eval-lm on ``split`` with one thread; the parsed result and the command."""
    cmd = run.eval_command(split)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    out = proc.stdout + proc.stderr
    res = parse_eval_output(out)
    if proc.returncode != 0 or res is None:
        raise RuntimeError(f"fairseq-eval-lm failed (exit {proc.returncode}): "
                           f"{' '.join(cmd)}\n{out[-3000:]}")
    return {**res, "command": readable(cmd, "eval_lm")}


def readable(cmd: List[str], tool: str) -> List[str]:
    """``cmd`` with the executable as its console-script name (``fairseq-train``), for the
    record; the data and user-dir paths stay as run."""
    return [f"fairseq-{tool.replace('_', '-')}", *cmd[len(fairseq_tool(tool)):]]



# The main rows with two seeds first (vanilla 3 and 6 layers, cycle_rev 6/3), then ALBERT's
# attention-only rule with two seeds (the question of the issue), then the other sharings.
QUEUE: List[Tuple[str, int]] = [
    ("vanilla_L3", 1), ("cycle_rev_6_3", 1), ("vanilla_L6", 1),
    ("vanilla_L3", 2), ("cycle_rev_6_3", 2), ("vanilla_L6", 2),
    ("attn_6", 1), ("attn_6", 2), ("ffn_6", 1), ("sequence_6_3", 1), ("universal_6", 1),
]
SPLITS = ("train", "valid", "test")


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
        loss = result["valid_loss"]
        return {"valid_ppl": None if loss is None else 2 ** loss,
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
    run = plan_run(LM_CONFIGS[name], seed, bin_dir, work, budget, progress, run_class=LMRun)
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


#: the LM queue: ``queue.work_pairs(SUITE, items, data, work, results, budget, ...)``
SUITE = queue.Suite("lm", run=queue.item_runner(run_item), commit_files=lm_commit)


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
    rates_dir = os.path.join(work, "rates")
    run = make_plan([LM_CONFIGS[name]], budget, bin_dir, rates_dir, runs_dir=rates_dir,
                    run_class=LMRun)[0]
    if run.skip_reason:
        raise RuntimeError(f"{name}: {run.skip_reason}")
    rates = measure_run(run, progress=progress)
    return {"name": name, "params": run.params, "updates_timed": rates["steady_updates"],
            "wall_s_per_update": rates["steady_s_per_update"],
            "cpu_s_per_update": rates["steady_cpu_s_per_update"],
            "wait_policy": rates["wait_policy"], "run_wall_s": rates["process_wall_s"],
            "budget": budget, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
