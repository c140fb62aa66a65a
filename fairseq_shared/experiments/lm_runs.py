"""The decoder-only language-model runs: configurations, the budget, one run's training
command (a :class:`~fairseq_shared.experiments.runs.Run`, so that
:func:`~fairseq_shared.experiments.training.train` trains and resumes it, and
:func:`~fairseq_shared.experiments.runs.count_params` counts its parameters), and its test
perplexity with ``fairseq-eval-lm``.

Vanilla rows are fairseq's own ``transformer_lm``; the shared rows are the registered
``transformer_lm_*`` families with the decoder's sharing given explicitly
(``--decoder-share-strategy/--decoder-unique-layers/--decoder-share-scope``).
"""

import os
import re
import subprocess
from typing import Dict, List, Optional

from fairseq_shared.experiments.runs import Run, set_params_or_skip
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

    def train_command(self) -> List[str]:
        b = self.budget
        cmd = fairseq_command(
            "train", self.data, *self.task_flags(), *self.model_flags(),
            "--dropout", str(b["dropout"]),
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
            "--lr", str(b["lr"]), "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", str(b["warmup_updates"]), "--warmup-init-lr", "1e-07",
            "--criterion", "cross_entropy",
            "--max-tokens", str(b["max_tokens"]), "--max-update", str(self.max_update),
            "--save-dir", self.dir, "--no-epoch-checkpoints",
            "--log-format", "json", "--log-interval", str(b["log_interval"]),
            "--seed", str(b["seed"]), "--num-workers", "0")
        if b.get("max_minutes"):
            cmd += ["--stop-time-hours", f"{b['max_minutes'] / 60:.6f}"]
        if b.get("save_interval_updates"):
            cmd += ["--save-interval-updates", str(b["save_interval_updates"]),
                    "--keep-interval-updates", "1"]
        if b.get("device", "cpu") == "cpu":
            cmd += ["--cpu"]
        return cmd

    def layer_cost(self) -> int:
        return self.N

    def eval_command(self, split: str = "test") -> List[str]:
        """fairseq-eval-lm on ``split``: every verse on its own (``--sample-break-mode eos``),
        every token scored, ``</s>`` included."""
        cmd = fairseq_command(
            "eval_lm", self.data, "--path", self.checkpoint, "--gen-subset", split,
            *self.task_flags(), "--max-tokens", str(self.budget["eval_max_tokens"]),
            "--num-workers", "0", "--log-format", "simple", "--seed", "1")
        return cmd + (["--cpu"] if self.budget.get("device", "cpu") == "cpu" else [])


def plan_runs(names: List[str], budget: Dict, data: str, runs_dir: str) -> List[LMRun]:
    """LMRuns with their parameter counts; a row whose architecture is not registered yet
    (or whose flags its model refuses) gets a ``skip_reason`` instead."""
    import logging

    import fairseq_shared  # noqa: F401

    runs = []
    logging.disable(logging.WARNING)
    try:
        for name in names:
            if name not in LM_CONFIGS:
                raise SystemExit(f"unknown LM configuration '{name}'; known: "
                                 f"{', '.join(LM_CONFIGS)}")
            run = LMRun(LM_CONFIGS[name], budget, data, runs_dir, runs_dir=runs_dir)
            set_params_or_skip(run)
            runs.append(run)
    finally:
        logging.disable(logging.NOTSET)
    return runs


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
