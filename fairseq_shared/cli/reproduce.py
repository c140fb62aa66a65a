"""Reproduce the papers' tables on a prepared corpus: train, decode, tabulate, plot.

    python -m fairseq_shared.cli.reproduce --data work/bible --out results/bible --budget small
    python -m fairseq_shared.cli.reproduce --data work/bible --out results/bible --budget small --dry-run

One run trains every configuration (``fairseq-train --user-dir fairseq_shared`` in a
subprocess), decodes all of them in one interleaved timing run
(:func:`fairseq_shared.timing.benchmark`, fairseq's own generator, sacreBLEU on the raw
references) and writes into ``--out``:

* ``tables.md``: Takase & Kiyono's table (vanilla, universal, sequence/cycle/cycle_rev at
  N=2M and N=3M: M, N, parameters, training speed relative to vanilla, BLEU, chrF), the
  ALBERT-style ablation for MT (nothing / attention only / FFN only / all shared, and grouped
  sharing), Xiao et al.'s table (baseline vs SAN and SAN with parameter sharing: BLEU and
  decoding speed) and one row per configuration with everything measured;
* ``results.json`` / ``results.csv`` (all numbers and the budget), ``decode/`` (the timing
  report, hypotheses), ``bleu_vs_params.png``, ``bleu_vs_speed.png``;
* ``runs/<config>/`` (or ``--runs DIR``): checkpoints, ``train.log``, ``plan.json``,
  ``done.json``.

Configurations are a small declarative list (:data:`CONFIGS`, or ``--config-file`` JSON of
the same shape): a name, the tables it appears in, an architecture and the per-stack sharing
as multiples of the budget's base depth ``L``. The budget (:data:`BUDGETS`, ``--budget NAME``
or a JSON file, plus ``--set key=value``) fixes width, base depth, updates, minutes, batch,
threads and decoding settings for all configurations alike.

Restartable: a configuration whose ``done.json`` matches its training command is skipped;
one that was interrupted resumes from fairseq's ``checkpoint_last.pt`` (the command is
identical, fairseq restores by default); one whose command changed is moved aside to
``runs/<config>.stale-<time>`` and retrained. The decoding stage is cached by a key over the
checkpoints and decode settings. Progress lines say the stage, k of n, elapsed and ETA.
"""

import argparse
import csv
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

USER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------- configurations
# N and M are "L" multiples ("L", "2L", "3L", "L/2" = ceil(L/2)) or plain integers.
# strategy/scope apply to both stacks (each stack on its own, as in Takase & Kiyono).
CONFIGS: List[Dict] = [
    dict(name="vanilla", tables=["takase", "albert", "xiao"], label="Vanilla",
         strategy="none", N="L", M="L"),
    # the equal-compute upper bound of the N=2L shared rows: as deep, unshared (2x parameters)
    dict(name="vanilla_2L", tables=["takase"], label="Vanilla (2L layers)",
         strategy="none", N="2L", M="2L"),
    dict(name="universal", tables=["takase", "albert"], label="Universal",
         strategy="universal", N="L", M=1),
    # the paper's universal row is wider (1024/4096) to roughly match vanilla's parameters;
    # optional (about 3-4x the cost of vanilla): select it with --configs ...,universal_wide
    dict(name="universal_wide", tables=["takase"], label="Universal (2x wider)",
         strategy="universal", N="L", M=1, width_mult=2, default=False),
    dict(name="sequence_2L", tables=["takase"], label="Sequence", strategy="sequence",
         N="2L", M="L"),
    dict(name="cycle_2L", tables=["takase"], label="Cycle", strategy="cycle", N="2L", M="L"),
    dict(name="cycle_rev_2L", tables=["takase", "xiao"], label="Cycle (rev)",
         strategy="cycle_rev", N="2L", M="L"),
    dict(name="sequence_3L", tables=["takase"], label="Sequence", strategy="sequence",
         N="3L", M="L"),
    dict(name="cycle_3L", tables=["takase"], label="Cycle", strategy="cycle", N="3L", M="L"),
    dict(name="cycle_rev_3L", tables=["takase"], label="Cycle (rev)", strategy="cycle_rev",
         N="3L", M="L"),
    # ALBERT-style ablation (all layers of a stack share; "all" is the universal row above)
    dict(name="attn_shared", tables=["albert"], label="attention only",
         strategy="universal", N="L", M=1, scope="attn"),
    dict(name="ffn_shared", tables=["albert"], label="FFN only",
         strategy="universal", N="L", M=1, scope="ffn"),
    dict(name="attn_grouped", tables=["albert"], label="attention only, grouped",
         strategy="sequence", N="L", M="L/2", scope="attn"),
    dict(name="all_grouped", tables=["albert"], label="all, grouped",
         strategy="sequence", N="L", M="L/2", scope="all"),
    # Xiao et al. 2019: attention-weight sharing in the decoder (transformer_san's default
    # policies: self {1},{2..N}; encoder-decoder in adjacent pairs)
    dict(name="san", tables=["xiao"], label="SAN", arch="transformer_san",
         strategy="none", N="L", M="L"),
    dict(name="san_cycle_rev_2L", tables=["xiao"], label="SAN + Cycle (rev)",
         arch="transformer_san", strategy="cycle_rev", N="2L", M="L"),
    # the SAN pair of the evidence runs: encoder L, decoder 2L (the paper's policies for a
    # 6-layer decoder at L=3: self 1,5, cross 2,2,2)
    dict(name="vanilla_dec2L", tables=["xiao"], label="Vanilla (decoder 2L)",
         strategy="none", N="L", M="L", decoder_N="2L", default=False),
    dict(name="san_dec2L", tables=["xiao"], label="SAN (decoder 2L)", arch="transformer_san",
         strategy="none", N="L", M="L", decoder_N="2L", default=False),
]

TABLES = ("takase", "albert", "xiao")

# ---------------------------------------------------------------------------- budgets
# decode_threads: 1 by default. On a 2-core machine shared with anything else, 2 intra-op
# threads made beam search ~7x slower than 1 thread (OpenMP oversubscription), and small-batch
# decoding gains little from a second thread anyway; the count is recorded with the numbers.
_DECODE_DEFAULTS = dict(beam=4, lenpen=1.0, batch_size=64, subset=None, repeats=3,
                        warmup_passes=1, warmup_batches=None, max_len_a=1.2, max_len_b=10,
                        decode_threads=1)
BUDGETS: Dict[str, Dict] = {
    # for tests: seconds per configuration
    "tiny": dict(L=2, dim=16, ffn=32, heads=2, max_update=8, max_minutes=None,
                 max_tokens=1000, lr=0.005, warmup_updates=4, dropout=0.1, threads=1,
                 save_interval_updates=0, log_interval=2, seed=1, device="cpu",
                 **{**_DECODE_DEFAULTS, "beam": 2, "batch_size": 16, "repeats": 1,
                    "warmup_passes": 0, "max_len_a": 1.0, "max_len_b": 5}),
    # the main job (`make demo`): two configurations in ~30 min on 2 dedicated CPU cores
    # (measured: ~3500 target tokens per update; vanilla 3+3 at d=256 ~800-3000 tok/s)
    # 200 updates: vanilla ~8 min at 1500 tok/s, cycle_rev (2x layers) ~14 min; the 15-min cap
    # per model only binds on a slower or busy machine (the table then shows fewer updates)
    "demo": dict(L=3, dim=256, ffn=1024, heads=4, max_update=200, max_minutes=15,
                 equal_updates=True,
                 max_tokens=4096, lr=0.0015, warmup_updates=60, dropout=0.1, threads=2,
                 save_interval_updates=100, log_interval=10, seed=1, device="cpu",
                 **{**_DECODE_DEFAULTS, "subset": 200, "repeats": 2, "warmup_batches": 2}),
    # the tables on 2 CPU cores: all 14 default configurations, equal updates (~2 epochs of
    # the Bible corpus); about 8 h on 2 dedicated cores (see results/README.md)
    "small": dict(L=3, dim=256, ffn=1024, heads=4, max_update=600, max_minutes=None,
                  max_tokens=4096, lr=0.0015, warmup_updates=150, dropout=0.1, threads=2,
                  save_interval_updates=100, log_interval=20, seed=1, device="cpu",
                  **{**_DECODE_DEFAULTS, "subset": 300, "repeats": 2, "warmup_batches": 3}),
    # the evidence runs on the clean split (fairseq_shared.evidence): 2 runs side by side at
    # 1 thread each; valid loss every 100 updates for the learning curves, all checkpoints kept.
    # d=128 with 2k-token batches: measured here, it reaches a lower valid loss per CPU-second
    # than d=256 with 4k-token batches in this regime (7.88 after ~5 min vs 8.14 after ~12).
    "evidence": dict(L=3, dim=128, ffn=512, heads=4, max_update=2000, max_minutes=None,
                     max_tokens=2048, lr=0.002, warmup_updates=150, dropout=0.1, threads=1,
                     save_interval_updates=100, keep_interval_updates=-1, log_interval=25,
                     seed=1, device="cpu",
                     **{**_DECODE_DEFAULTS, "repeats": 1, "warmup_passes": 0}),
    # one GPU: base width, the paper's depth
    "base": dict(L=6, dim=512, ffn=2048, heads=8, max_update=20000, max_minutes=None,
                 max_tokens=8192, lr=0.001, warmup_updates=4000, dropout=0.3, threads=4,
                 save_interval_updates=2000, log_interval=100, seed=1, device="cuda",
                 **{**_DECODE_DEFAULTS, "subset": None, "repeats": 3, "batch_size": 128}),
}


def load_budget(name_or_path: str, overrides: Optional[List[str]] = None) -> Dict:
    if name_or_path in BUDGETS:
        budget = dict(BUDGETS[name_or_path], name=name_or_path)
    elif os.path.exists(name_or_path):
        with open(name_or_path) as f:
            budget = dict(BUDGETS["small"], **json.load(f), name=os.path.basename(name_or_path))
    else:
        raise SystemExit(f"--budget: '{name_or_path}' is neither one of {list(BUDGETS)} "
                         "nor a JSON file")
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or key not in budget:
            raise SystemExit(f"--set {item}: expected KEY=VALUE with KEY one of {sorted(budget)}")
        budget[key] = _parse_value(value)
    return budget


def _parse_value(v: str):
    if v.lower() in ("none", "null", ""):
        return None
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def resolve_count(expr, L: int) -> int:
    if isinstance(expr, int):
        return expr
    expr = str(expr).strip()
    m = re.fullmatch(r"(\d*)L(?:/(\d+))?", expr)
    if m:
        mult = int(m.group(1) or 1)
        return max(1, math.ceil(mult * L / int(m.group(2) or 1)))
    return int(expr)


# ---------------------------------------------------------------------------- data
def corpus_paths(data: str):
    """-> (bin_dir, src, tgt, joined). Data is the corpus root (with bin/) or a bin dir."""
    from fairseq_shared.timing import resolve_data

    bin_dir, _ = resolve_data(data)
    dicts = sorted(f for f in os.listdir(bin_dir) if re.fullmatch(r"dict\.[^.]+\.txt", f))
    pairs = sorted({m.group(1) for f in os.listdir(bin_dir)
                    for m in [re.fullmatch(r"train\.([^.]+-[^.]+)\.[^.]+\.bin", f)] if m})
    if not pairs:
        raise SystemExit(f"{bin_dir}: no fairseq-preprocess output (train.SRC-TGT.*.bin)")
    src, tgt = pairs[0].split("-")
    d1 = os.path.join(bin_dir, f"dict.{src}.txt")
    d2 = os.path.join(bin_dir, f"dict.{tgt}.txt")
    joined = open(d1, "rb").read() == open(d2, "rb").read() if len(dicts) == 2 else False
    return bin_dir, src, tgt, joined


# ---------------------------------------------------------------------------- plan
class Run:
    """One configuration under one budget: its training command and state on disk."""

    def __init__(self, config: Dict, budget: Dict, data: str, out: str,
                 runs_dir: Optional[str] = None):
        self.config, self.budget, self.data = config, budget, data
        self.name = config["name"]
        self.dir = os.path.join(runs_dir or os.path.join(out, "runs"), self.name)
        L = budget["L"]
        self.N = resolve_count(config.get("N", "L"), L)
        self.dec_N = resolve_count(config.get("decoder_N", config.get("N", "L")), L)
        self.M = resolve_count(config.get("M", "L"), L)
        self.strategy = config.get("strategy", "none")
        self.scope = config.get("scope", "all")
        self.arch = config.get("arch", "shared_transformer")
        self.skip_reason: Optional[str] = None
        self.params: Optional[int] = None
        # the budget's limit; with budget["equal_updates"], lowered to what vanilla reached
        self.max_update: int = int(budget["max_update"])

    # -- command
    def model_flags(self) -> List[str]:
        b = self.budget
        flags = ["--arch", self.arch]
        w = int(self.config.get("width_mult", 1))
        for stack in ("encoder", "decoder"):
            flags += [f"--{stack}-layers", str(self.N if stack == "encoder" else self.dec_N),
                      f"--{stack}-embed-dim", str(w * b["dim"]),
                      f"--{stack}-ffn-embed-dim", str(w * b["ffn"]),
                      f"--{stack}-attention-heads", str(b["heads"]),
                      f"--{stack}-share-strategy", self.strategy,
                      f"--{stack}-share-scope", self.scope]
            if self.strategy in ("sequence", "cycle", "cycle_rev"):
                flags += [f"--{stack}-unique-layers", str(self.M)]
        return flags + [str(x) for x in self.config.get("extra", [])]

    def train_command(self) -> List[str]:
        b = self.budget
        bin_dir, src, tgt, joined = corpus_paths(self.data)
        cmd = [os.path.join(os.path.dirname(sys.executable), "fairseq-train"), bin_dir,
               "--user-dir", USER_DIR, "--task", "translation",
               "--source-lang", src, "--target-lang", tgt,
               *self.model_flags(),
               "--dropout", str(b["dropout"]),
               "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
               "--lr", str(b["lr"]), "--lr-scheduler", "inverse_sqrt",
               "--warmup-updates", str(b["warmup_updates"]), "--warmup-init-lr", "1e-07",
               "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
               "--max-tokens", str(b["max_tokens"]), "--max-update", str(self.max_update),
               "--save-dir", self.dir, "--no-epoch-checkpoints",
               "--log-format", "json", "--log-interval", str(b["log_interval"]),
               "--seed", str(b["seed"]), "--num-workers", "0"]
        if joined:
            cmd += ["--share-all-embeddings"]
        if b.get("max_minutes"):
            cmd += ["--stop-time-hours", f"{b['max_minutes'] / 60:.6f}"]
        if b.get("save_interval_updates"):
            cmd += ["--save-interval-updates", str(b["save_interval_updates"]),
                    "--keep-interval-updates", str(b.get("keep_interval_updates", 1))]
        if b.get("device", "cpu") == "cpu":
            cmd += ["--cpu"]
        return cmd

    def key(self) -> str:
        """Hash of the training command without its limits (--max-update, --stop-time-hours)
        and its locations (--save-dir, --user-dir): raising a limit continues the same run from
        checkpoint_last.pt; any other change (model, data, optimizer, batch) starts anew."""
        cmd = self.train_command()[1:]
        for flag in ("--max-update", "--stop-time-hours", "--save-dir", "--user-dir"):
            if flag in cmd:
                i = cmd.index(flag)
                cmd = cmd[:i] + cmd[i + 2:]
        return hashlib.sha256(json.dumps(cmd).encode()).hexdigest()[:16]

    def limits(self) -> Dict:
        return {"max_update": self.max_update,
                "max_minutes": self.budget.get("max_minutes")}

    # -- state
    @property
    def checkpoint(self) -> str:
        return os.path.join(self.dir, "checkpoint_last.pt")

    def done_info(self) -> Optional[Dict]:
        path = os.path.join(self.dir, "done.json")
        if not os.path.exists(path) or not os.path.exists(self.checkpoint):
            return None
        with open(path) as f:
            info = json.load(f)
        if info.get("key") != self.key():
            return None
        # finished under the same limits, or already reached this budget's update limit
        if info.get("limits") == self.limits() or info.get("updates", 0) >= self.max_update:
            return info
        return None

    def state(self) -> str:
        if self.skip_reason:
            return "skipped"
        if self.done_info():
            return "done"
        plan = os.path.join(self.dir, "plan.json")
        if os.path.exists(plan):
            with open(plan) as f:
                same = json.load(f).get("key") == self.key()
            if not same:
                return "stale"
            return "partial" if os.path.exists(self.checkpoint) else "started"
        return "new"

    def layer_cost(self) -> int:
        return self.N + self.dec_N  # layers run per update (encoder + decoder)


def count_params(run: Run) -> int:
    """Build the model (no training) with the corpus's dictionaries and count unique params."""
    import torch
    from fairseq import options
    from fairseq.data import Dictionary
    from fairseq.tasks.translation import TranslationTask

    import fairseq_shared  # noqa: F401

    bin_dir, src, tgt, joined = corpus_paths(run.data)
    src_dict = Dictionary.load(os.path.join(bin_dir, f"dict.{src}.txt"))
    tgt_dict = src_dict if joined else Dictionary.load(os.path.join(bin_dir, f"dict.{tgt}.txt"))
    cmd = run.train_command()
    args = options.parse_args_and_arch(options.get_training_parser(), cmd[1:])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = TranslationTask(args, src_dict, tgt_dict).build_model(args)
        return sum(p.numel() for p in model.parameters())
    finally:
        torch.set_num_threads(threads)


def make_plan(configs: List[Dict], budget: Dict, data: str, out: str, log=print,
              runs_dir: Optional[str] = None) -> List[Run]:
    import logging

    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_shared  # noqa: F401

    runs = []
    logging.disable(logging.WARNING)
    try:
        for cfg in configs:
            run = Run(cfg, budget, data, out, runs_dir)
            if run.arch not in ARCH_MODEL_REGISTRY:
                run.skip_reason = (f"architecture '{run.arch}' is not registered (not built yet);"
                                   " row skipped")
            else:
                try:
                    run.params = count_params(run)
                except (Exception, SystemExit) as e:  # noqa: BLE001  bad flags for this model
                    run.skip_reason = f"cannot build the model: {type(e).__name__}: {e}"
            runs.append(run)
    finally:
        logging.disable(logging.NOTSET)
    return runs


def print_plan(runs: List[Run], budget: Dict, log=print):
    log(f"budget '{budget['name']}': " + ", ".join(f"{k}={v}" for k, v in budget.items()
                                                  if k != "name"))
    log("| # | config | arch | N | M | strategy | scope | params | state | relative cost |")
    log("|---|---|---|---|---|---|---|---|---|---|")
    base = next((r.layer_cost() for r in runs if r.name == "vanilla"), 2 * budget["L"])
    for i, r in enumerate(runs, 1):
        p = f"{r.params:,}" if r.params else "-"
        log(f"| {i} | {r.name} | {r.arch} | {r.N} | {r.M} | {r.strategy} | {r.scope} | {p} | "
            f"{r.state()} | x{r.layer_cost() / base:.1f} |")
    for r in runs:
        if r.skip_reason:
            log(f"  skip {r.name}: {r.skip_reason}")
    log(f"[plan] {estimate_left(runs, budget)}")


def estimate_left(runs: List[Run], budget: Dict) -> str:
    """Training time left, from the speed of finished runs (seconds per update per layer)."""
    rates = []
    for r in runs:
        info = r.done_info() if not r.skip_reason else None
        if info and info.get("updates") and info.get("training_seconds"):
            rates.append(info["training_seconds"] / (info["updates"] * r.layer_cost()))
    left = [r for r in runs if not r.skip_reason and r.state() != "done"]
    if not left:
        return "all configurations trained"
    cost = sum(budget["max_update"] * r.layer_cost() for r in left)
    if not rates:
        base = 2 * budget["L"]
        return (f"{len(left)} configurations to train, {cost / budget['max_update'] / base:.0f} "
                f"vanilla-equivalents of layers x {budget['max_update']} updates; time "
                "estimate once the first one has finished")
    hours = statistics.median(rates) * cost / 3600
    cap = budget.get("max_minutes")
    if cap:
        hours = min(hours, len(left) * cap / 60)
    return f"{len(left)} configurations to train, about {hours:.1f} h at the speed measured so far"


# ---------------------------------------------------------------------------- training
_JSON_RE = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")


def parse_train_log(path: str) -> Dict:
    """Training statistics from fairseq's JSON log lines (all attempts appended)."""
    inner, epochs, valids = [], [], []
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = _JSON_RE.search(line)
                if not m:
                    continue
                try:
                    rec = json.loads(m.group(2))
                except json.JSONDecodeError:
                    continue
                {"train_inner": inner, "train": epochs, "valid": valids}[m.group(1)].append(rec)
    wps = [float(r["wps"]) for r in inner[1:] if "wps" in r] or \
          [float(r["wps"]) for r in inner if "wps" in r] or \
          [float(r["train_wps"]) for r in epochs if "train_wps" in r]
    ups = [float(r["ups"]) for r in inner[1:] if "ups" in r] or \
          [float(r["train_ups"]) for r in epochs if "train_ups" in r]
    updates = 0
    for r in inner + epochs:
        updates = max(updates, int(float(r.get("num_updates", r.get("train_num_updates", 0)))))
    return {
        "train_wps": statistics.median(wps) if wps else None,
        "train_ups": statistics.median(ups) if ups else None,
        "updates": updates,
        "valid_loss": float(valids[-1]["valid_loss"]) if valids else None,
        "valid_nll_loss": float(valids[-1]["valid_nll_loss"]) if valids and
        "valid_nll_loss" in valids[-1] else None,
    }


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
    stats = parse_train_log(log_path)
    ck = checkpoint_progress(run.checkpoint)
    stats["updates"] = max(stats["updates"], ck["updates"])
    info = {"key": key, "name": run.name, "params": run.params, "limits": run.limits(),
            "wall_seconds_last_attempt": time.time() - t0, "training_seconds": ck["seconds"],
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "note": note, **stats}
    tmp = os.path.join(run.dir, "done.json.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f, indent=2)
    os.replace(tmp, os.path.join(run.dir, "done.json"))
    return info


def train(run: Run, progress, k: int, n: int, t_overall: float) -> Dict:
    """Train (or resume) one configuration; returns its done.json content."""
    state = run.state()
    if state == "stale":
        stale = f"{run.dir}.stale-{time.strftime('%Y%m%d-%H%M%S')}"
        progress(f"[train {k}/{n}] {run.name}: training command changed; moving the old run "
                 f"to {stale}")
        shutil.move(run.dir, stale)
    os.makedirs(run.dir, exist_ok=True)
    cmd = run.train_command()
    key = run.key()
    with open(os.path.join(run.dir, "plan.json"), "w") as f:
        json.dump({"key": key, "command": cmd, "config": run.config, "budget": run.budget,
                   "params": run.params}, f, indent=2)
    env = dict(os.environ, OMP_NUM_THREADS=str(run.budget["threads"]),
               MKL_NUM_THREADS=str(run.budget["threads"]), PYTHONUNBUFFERED="1")
    log_path = os.path.join(run.dir, "train.log")
    resumed = os.path.exists(run.checkpoint)
    if resumed:
        # killed after its final checkpoint but before done.json: fairseq would run one
        # more update on restart, so finish here instead
        ck = checkpoint_progress(run.checkpoint)
        max_min = run.budget.get("max_minutes")
        if ck["updates"] >= run.max_update or (max_min and ck["seconds"] >= 60 * max_min):
            info = _write_done(run, key, time.time(), log_path,
                               note="complete in checkpoint_last.pt")
            progress(f"[train {k}/{n}] {run.name}: already complete in checkpoint_last.pt "
                     f"({ck['updates']} updates); marked done")
            return info
    progress(f"[train {k}/{n}] {run.name}: {'resuming from checkpoint_last.pt' if resumed else 'starting'}"
             f" (N={run.N}, M={run.M}, {run.strategy}/{run.scope}, "
             f"{run.params:,} params, max {run.budget['max_update']} updates)")
    t0 = time.time()
    max_update = run.max_update
    with open(log_path, "a", encoding="utf-8") as logf:
        logf.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                text=True, bufsize=1)
        last_print = 0.0
        first_update = None
        try:
            for line in proc.stdout:
                logf.write(line)
                logf.flush()
                m = _JSON_RE.search(line)
                if m and m.group(1) == "train_inner":
                    rec = json.loads(m.group(2))
                    upd = int(float(rec.get("num_updates", 0)))
                    now = time.time()
                    if first_update is None:
                        first_update = (upd, now)
                    if now - last_print > 20 or upd >= max_update:
                        last_print = now
                        u0, t_u0 = first_update
                        rate = (upd - u0) / (now - t_u0) if now > t_u0 and upd > u0 else None
                        eta = f"{(max_update - upd) / rate / 60:.1f} min" if rate else "?"
                        progress(f"[train {k}/{n}] {run.name}: update {upd}/{max_update}, "
                                 f"loss {rec.get('loss')}, {rec.get('wps')} tok/s, "
                                 f"elapsed {(now - t0) / 60:.1f} min (total "
                                 f"{(now - t_overall) / 60:.1f} min), ETA {eta}")
                elif m and m.group(1) == "valid":
                    rec = json.loads(m.group(2))
                    progress(f"[train {k}/{n}] {run.name}: valid loss {rec.get('valid_loss')} "
                             f"at update {rec.get('valid_num_updates')}")
            rc = proc.wait()
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
    if rc != 0 or not os.path.exists(run.checkpoint):
        tail = "".join(open(log_path, encoding="utf-8", errors="replace").readlines()[-15:])
        raise RuntimeError(f"fairseq-train failed for {run.name} (exit {rc}); see {log_path}:\n{tail}")
    info = _write_done(run, key, t0, log_path)
    stats = info
    progress(f"[train {k}/{n}] {run.name}: done, {stats['updates']} updates, "
             f"{stats['train_wps']} tok/s (median), valid loss {stats['valid_loss']}")
    return info


# ---------------------------------------------------------------------------- decoding
def decode_args(budget: Dict) -> List[str]:
    args = ["--beam", str(budget["beam"]), "--lenpen", str(budget["lenpen"]),
            "--batch-size", str(budget["batch_size"]),
            "--max-len-a", str(budget["max_len_a"]), "--max-len-b", str(budget["max_len_b"]),
            "--gen-subset", "test"]
    if budget.get("device", "cpu") == "cpu":
        args += ["--cpu"]
    return args


def decode_all(runs: List[Run], budget: Dict, data: str, out: str, progress) -> Dict:
    """One interleaved timing run over every trained configuration (cached)."""
    from fairseq_shared import timing

    trained = [r for r in runs if not r.skip_reason]
    ckpts = {r.name: r.checkpoint for r in trained}
    settings = {k: budget[k] for k in ("beam", "lenpen", "batch_size", "subset", "repeats",
                                       "warmup_passes", "warmup_batches", "max_len_a",
                                       "max_len_b", "decode_threads", "device")}
    key_src = json.dumps({"settings": settings, "ckpts": {
        n: [p, os.path.getmtime(p), os.path.getsize(p)] for n, p in ckpts.items()}},
        sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    ddir = os.path.join(out, "decode")
    done = os.path.join(ddir, "done.json")
    if os.path.exists(done):
        with open(done) as f:
            if json.load(f).get("key") == key:
                progress(f"[decode] up to date ({ddir}); skipped")
                with open(os.path.join(ddir, "results.json")) as g:
                    return json.load(g)
    n = len(ckpts)
    progress(f"[decode] {n} models, {budget['warmup_passes']} warm-up + {budget['repeats']} "
             f"timed passes each, interleaved; subset: {budget['subset'] or 'all'}")
    baseline = "vanilla" if "vanilla" in ckpts else next(iter(ckpts))
    report = timing.benchmark(
        ckpts, data, decode_args(budget), baseline=baseline, warmup=budget["warmup_passes"],
        warmup_batches=budget["warmup_batches"], repeats=budget["repeats"],
        subset=budget["subset"], threads=budget["decode_threads"], progress=progress,
    )
    timing.write_report(report, ddir)
    with open(done, "w") as f:
        json.dump({"key": key}, f)
    return report.to_json()


# ---------------------------------------------------------------------------- tables
def _f(x, spec=".2f", pre=""):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return pre + format(x, spec)


def collect_rows(runs: List[Run], decode: Optional[Dict]) -> List[Dict]:
    dec = {r["model"]: r for r in (decode or {}).get("results", [])}
    rows = []
    base_wps = None
    infos = {r.name: (r.done_info() or {}) for r in runs}
    if infos.get("vanilla", {}).get("train_wps"):
        base_wps = infos["vanilla"]["train_wps"]
    for r in runs:
        info, d = infos[r.name], dec.get(r.name, {})
        rows.append({
            "name": r.name, "label": r.config.get("label", r.name), "tables": r.config.get("tables", []),
            "arch": r.arch, "strategy": r.strategy, "scope": r.scope, "M": r.M, "N": r.N,
            "params": r.params, "skip_reason": r.skip_reason,
            "updates": info.get("updates"), "train_wps": info.get("train_wps"),
            "train_speed_vs_vanilla": (info["train_wps"] / base_wps)
            if base_wps and info.get("train_wps") else None,
            "valid_loss": info.get("valid_loss"),
            "bleu": d.get("bleu"), "chrf": d.get("chrf"),
            "decode_tokens_per_s": d.get("tokens_per_s_median"),
            "decode_sentences_per_s": d.get("sentences_per_s_median"),
            "decode_speed_vs_vanilla": d.get("speed_vs_baseline"),
            "decode_sent_speed_vs_vanilla": d.get("sent_speed_vs_baseline"),
            "decode_tokens_per_s_min": d.get("tokens_per_s_min"),
            "decode_tokens_per_s_max": d.get("tokens_per_s_max"),
            "ms_per_token": d.get("ms_per_token"),
            "output_tokens": d.get("output_tokens"), "sentences": d.get("sentences"),
        })
    return rows


def heldout_baseline(data: str, budget: Dict, decode: Optional[Dict], out: str,
                     rows: List[Dict]) -> Optional[Dict]:
    """The corpus's lookup baseline on the decoded test sentences (None without an audit).
    Where those sentences include near-duplicates of training data, each row also gets its
    BLEU/chrF on the near-duplicate-free rest (``bleu_clean``, ``chrf_clean``)."""
    from fairseq_shared import timing
    from fairseq_shared.data import audit

    _, _, tgt, _ = corpus_paths(data)
    refs_path = os.path.join(data, "raw", f"test.{tgt}")
    if not os.path.exists(refs_path):
        return None
    with open(refs_path, encoding="utf-8") as f:
        num = sum(1 for _ in f)
    ids = timing.select_ids(num, budget.get("subset"))
    lookup = audit.heldout_baseline(data, ids, "test", tgt)
    if lookup and lookup["near_duplicate_positions"] and decode:
        refs = [audit.read_lines(refs_path)[i] for i in ids]
        for r in rows:
            hyp = os.path.join(out, "decode", f"hyp.{r['name']}.txt")
            if os.path.exists(hyp):
                clean = audit.score_without(audit.read_lines(hyp), refs,
                                            lookup["near_duplicate_positions"])
                r["bleu_clean"], r["chrf_clean"] = clean["bleu"], clean["chrf"]
    return lookup


def lookup_lines(lookup: Optional[Dict], columns: int, bleu_at: int) -> List[str]:
    """A table row for the lookup baseline: BLEU and chrF in columns ``bleu_at`` and the next."""
    if not lookup:
        return []
    cells = ["-"] * columns
    cells[0] = "lookup baseline (no model: closest training verse)"
    cells[bleu_at], cells[bleu_at + 1] = f"{lookup['bleu']:.2f}", f"{lookup['chrf']:.2f}"
    return ["| " + " | ".join(cells) + " |"]


def render_tables(rows: List[Dict], budget: Dict, decode: Optional[Dict],
                  lookup: Optional[Dict] = None) -> str:
    s = (decode or {}).get("settings", {})
    out = [f"# Reproduced tables (budget `{budget['name']}`)", "",
           f"Budget: {', '.join(f'{k}={v}' for k, v in budget.items() if k != 'name')}.",
           f"Every configuration has width d={budget['dim']} (FFN {budget['ffn']}, "
           f"{budget['heads']} heads), the same updates, batch and optimizer; L={budget['L']}.",
           ""]
    if s:
        out.append(f"Decoding: `{s.get('gen_subset')}` ({s.get('subset')}), beam {s.get('beam')}, "
                   f"lenpen {s.get('lenpen')}, batch {s.get('batch_size')}, device "
                   f"{s.get('device')}, {s.get('torch_threads')} threads; "
                   f"{s.get('warmup_passes')} warm-up + {s.get('timed_passes')} timed passes, "
                   f"interleaved. BLEU: `{decode.get('bleu_signature')}`; chrF: "
                   f"`{decode.get('chrf_signature')}`. References: {s.get('references')}.")
        out.append("")
    if lookup:
        n_near = len(lookup["near_duplicate_positions"])
        out += [f"Lookup baseline (no model; the English of the training verse whose Spanish is "
                f"closest, `python -m fairseq_shared.data.audit`) on the same "
                f"{lookup['sentences']} sentences: BLEU {lookup['bleu']:.2f}, chrF "
                f"{lookup['chrf']:.2f}. Test near-duplicates of training data (chrF >= 70): "
                f"{100 * lookup['near_duplicate_share_70']:.1f}%"
                + (f"; {n_near} of the decoded sentences, so the all-configurations table "
                   "also gives BLEU without them." if n_near else "."), ""]

    def skipped(r):
        return f" (skipped: {r['skip_reason']})" if r["skip_reason"] else ""

    # Takase & Kiyono
    out += ["## Parameter sharing across layers (Takase & Kiyono 2021)", "",
            "| method | M | N | params | train speed | updates | BLEU | chrF |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    out += lookup_lines(lookup, 8, 6)
    for r in rows:
        if "takase" in r["tables"]:
            out.append(f"| {r['label']}{skipped(r)} | {r['M']} | {r['N']} | "
                       f"{_f(r['params'], ',')} | {_f(r['train_speed_vs_vanilla'], '.2f', 'x')} | "
                       f"{_f(r['updates'], 'd')} | {_f(r['bleu'])} | {_f(r['chrf'])} |")
    # ALBERT
    out += ["", "## What is shared (ALBERT-style ablation, for MT)", "",
            "| shared | grouping (sets per stack) | params | train speed | BLEU | chrF |",
            "|---|---|---:|---:|---:|---:|"]
    out += lookup_lines(lookup, 6, 4)
    albert_label = {"vanilla": "nothing", "universal": "all"}
    for r in rows:
        if "albert" in r["tables"]:
            label = albert_label.get(r["name"], r["label"])
            grouping = "none" if r["strategy"] == "none" else (
                f"all {r['N']} layers" if r["M"] == 1 or r["strategy"] == "universal"
                else f"{r['strategy']}, {r['M']} groups")
            out.append(f"| {label}{skipped(r)} | {grouping} | {_f(r['params'], ',')} | "
                       f"{_f(r['train_speed_vs_vanilla'], '.2f', 'x')} | {_f(r['bleu'])} | "
                       f"{_f(r['chrf'])} |")
    # Xiao
    out += ["", "## Attention-weight sharing in the decoder (Xiao et al. 2019)", "",
            "| method | N | params | BLEU | chrF | decode tok/s | decode sent/s | speed vs baseline |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    out += lookup_lines(lookup, 8, 3)
    for r in rows:
        if "xiao" in r["tables"]:
            label = "Baseline" if r["name"] == "vanilla" else r["label"]
            out.append(f"| {label}{skipped(r)} | {r['N']} | {_f(r['params'], ',')} | "
                       f"{_f(r['bleu'])} | {_f(r['chrf'])} | "
                       f"{_f(r['decode_tokens_per_s'], '.1f')} | "
                       f"{_f(r['decode_sentences_per_s'], '.2f')} | "
                       f"{_f(r['decode_speed_vs_vanilla'], '.2f', 'x')} |")
    # everything
    out += ["", "## All configurations", "",
            "| config | arch | strategy | scope | M | N | params | updates | train tok/s | "
            "train speed | valid loss | BLEU | chrF | decode tok/s (min-max) | decode speed |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(
            f"| {r['name']}{skipped(r)} | {r['arch']} | {r['strategy']} | {r['scope']} | {r['M']} | "
            f"{r['N']} | {_f(r['params'], ',')} | {_f(r['updates'], 'd')} | "
            f"{_f(r['train_wps'], '.0f')} | {_f(r['train_speed_vs_vanilla'], '.2f', 'x')} | "
            f"{_f(r['valid_loss'], '.3f')} | {_f(r['bleu'])} | {_f(r['chrf'])} | "
            f"{_f(r['decode_tokens_per_s'], '.1f')} ({_f(r['decode_tokens_per_s_min'], '.1f')}-"
            f"{_f(r['decode_tokens_per_s_max'], '.1f')}) | "
            f"{_f(r['decode_speed_vs_vanilla'], '.2f', 'x')} |")
    if any("bleu_clean" in r for r in rows):
        out += ["", "BLEU / chrF without the test near-duplicates: " + ", ".join(
            f"{r['name']} {_f(r.get('bleu_clean'))} / {_f(r.get('chrf_clean'))}" for r in rows)]
    out += ["", "Training speed: median fairseq `wps` (target tokens/s) over the logged "
            "intervals, relative to vanilla. Decoding speed: median output tokens/s over the "
            "timed passes (fairseq's generator, time inside `task.inference_step`); ratios "
            "are the median per-round ratio against vanilla.", ""]
    return "\n".join(out)


def plot(rows: List[Dict], out: str) -> List[str]:
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq leaves root at DEBUG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for xkey, xlabel, fname in (("params", "unique parameters", "bleu_vs_params.png"),
                                ("decode_tokens_per_s", "decoding speed (output tokens/s)",
                                 "bleu_vs_speed.png")):
        pts = [r for r in rows if r.get(xkey) and r.get("bleu") is not None]
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        for r in pts:
            ax.scatter(r[xkey], r["bleu"], s=30)
            ax.annotate(r["name"], (r[xkey], r["bleu"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("BLEU (sacreBLEU)")
        ax.set_title(f"BLEU against {xlabel}")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = os.path.join(out, fname)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def write_results(rows, budget, decode, out, lookup=None) -> Dict[str, str]:
    os.makedirs(out, exist_ok=True)
    paths = {"tables": os.path.join(out, "tables.md"),
             "json": os.path.join(out, "results.json"),
             "csv": os.path.join(out, "results.csv")}
    with open(paths["tables"], "w", encoding="utf-8") as f:
        f.write(render_tables(rows, budget, decode, lookup))
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump({"budget": budget, "rows": rows, "lookup": lookup,
                   "decode_settings": (decode or {}).get("settings"),
                   "bleu_signature": (decode or {}).get("bleu_signature"),
                   "chrf_signature": (decode or {}).get("chrf_signature")},
                  f, indent=2, default=str)
    with open(paths["csv"], "w", newline="", encoding="utf-8") as f:
        fields = [k for k in rows[0] if k != "tables"] if rows else []
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    for p in plot(rows, out):
        paths[os.path.basename(p)] = p
    return paths


# ---------------------------------------------------------------------------- driver
def select_configs(configs: List[Dict], names: Optional[str], tables: Optional[str]) -> List[Dict]:
    """By name (any configuration), else by table, else every default configuration."""
    chosen = [c for c in configs if c.get("default", True)]
    if tables:
        want = set(tables.split(","))
        unknown = want - set(TABLES)
        if unknown:
            raise SystemExit(f"--tables: unknown {sorted(unknown)}; allowed: {', '.join(TABLES)}")
        chosen = [c for c in chosen if want & set(c.get("tables", []))]
    if names:
        want = names.split(",")
        known = {c["name"]: c for c in configs}
        unknown = [n for n in want if n not in known]
        if unknown:
            raise SystemExit(f"--configs: unknown {unknown}; known: {', '.join(known)}")
        chosen = [known[n] for n in want]
    return chosen


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


def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="prepared corpus root (bin/, raw/, spm.model)")
    p.add_argument("--out", required=True, help="output directory (runs/, decode/, tables)")
    p.add_argument("--runs", default=None,
                   help="where checkpoints and training logs go (default <out>/runs)")
    p.add_argument("--budget", default="small",
                   help=f"one of {', '.join(BUDGETS)} or a JSON file (default small)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one budget value, e.g. --set max_update=500 --set threads=2")
    p.add_argument("--configs", help="comma-separated configuration names (default: all "
                   "default ones; optional: universal_wide)")
    p.add_argument("--tables", help=f"only configurations of these tables ({', '.join(TABLES)})")
    p.add_argument("--config-file", help="JSON list of configurations replacing the defaults")
    p.add_argument("--threads", type=int, help="shorthand for --set threads=N")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (configs, parameter counts, state) and exit")
    p.add_argument("--no-decode", action="store_true", help="train only")
    return p


def _terminate_on_sigterm():
    """SIGTERM -> SystemExit, so that a running fairseq-train child is terminated too."""
    import signal

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass


def main(argv=None):
    _terminate_on_sigterm()
    args = build_parser().parse_args(argv)
    overrides = list(args.set) + ([f"threads={args.threads}"] if args.threads else [])
    budget = load_budget(args.budget, overrides)
    configs = CONFIGS
    if args.config_file:
        with open(args.config_file) as f:
            configs = json.load(f)
    configs = select_configs(configs, args.configs, args.tables)
    if budget.get("device") == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("[plan] no CUDA device: training and decoding on CPU", flush=True)
            budget["device"] = "cpu"
    os.environ.setdefault("OMP_NUM_THREADS", str(budget["threads"]))
    reproduce(args.data, args.out, budget, configs, dry_run=args.dry_run,
              skip_decode=args.no_decode, runs_dir=args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
