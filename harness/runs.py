"""One configuration under one budget (:class:`Run`: its training command, its state on disk),
its parameter count, and a plan of several (:func:`make_plan`, :func:`print_plan`) or of one
seed's run (:func:`plan_run`)."""

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, List, Optional

from harness.configs import depths, resolve_count
from harness.corpus import corpus_paths, training_bin
from harness.queue import read_json
from fairseq_shared.fairseq_commands import fairseq_command, fairseq_tool
from fairseq_shared.sharing.assignment import DEFAULT_SCOPE, DEFAULT_STRATEGY, M_STRATEGIES

class Run:
    """One configuration under one budget: its training command and state on disk."""

    def __init__(self, config: Dict, budget: Dict, data: str, out: str,
                 runs_dir: Optional[str] = None):
        self.config, self.budget, self.data = config, budget, data
        self.name = config["name"]
        self.dir = os.path.join(runs_dir or os.path.join(out, "runs"), self.name)
        L = budget["L"]
        self.N, self.dec_N = depths(config, L)
        self.M = resolve_count(config.get("M", "L"), L)
        self.strategy = config.get("strategy", DEFAULT_STRATEGY)
        self.scope = config.get("scope", DEFAULT_SCOPE)
        self.arch = config.get("arch", "shared_transformer")
        self.skip_reason: Optional[str] = None
        self.params: Optional[int] = None
        # the budget's limit; with budget["equal_updates"], lowered to what vanilla reached
        self.max_update: int = int(budget["max_update"])
        # the run's progress, held: the updates trained (read from checkpoint_last.pt once,
        # then what each chunk of training returns) and the validations of train.log (parsed
        # once after each chunk); harness.run_record.checkpoint_updates and run_curve
        self.updates: Optional[int] = None
        self.curve: Optional[List[Dict]] = None

    def model_flags(self) -> List[str]:
        b = self.budget
        flags = ["--arch", self.arch]
        w = int(self.config.get("width_mult", 1))
        for stack in ("encoder", "decoder"):
            strategy = self.config.get(f"{stack}_strategy", self.strategy)  # e.g. a learned map
            flags += [f"--{stack}-layers", str(self.N if stack == "encoder" else self.dec_N),
                      f"--{stack}-embed-dim", str(w * b["dim"]),
                      f"--{stack}-ffn-embed-dim", str(w * b["ffn"]),
                      f"--{stack}-attention-heads", str(b["heads"]),
                      f"--{stack}-share-strategy", strategy,
                      f"--{stack}-share-scope", self.scope]
            if strategy in M_STRATEGIES:
                flags += [f"--{stack}-unique-layers", str(self.M)]
            if b.get("normalize_before"):
                flags += [f"--{stack}-normalize-before"]
        return flags + [str(x) for x in self.config.get("extra", [])]

    def train_command(self) -> List[str]:
        b = self.budget
        _, src, tgt, joined_vocabulary = corpus_paths(self.data)
        cmd = fairseq_command(
               "train", training_bin(self.data, self.config.get("data", "raw")),
               "--task", "translation", "--source-lang", src, "--target-lang", tgt,
               *self.model_flags(), "--dropout", str(b["dropout"]),
               "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
               "--lr", str(b["lr"]), "--lr-scheduler", "inverse_sqrt",
               "--warmup-updates", str(b["warmup_updates"]), "--warmup-init-lr", "1e-07",
               "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
               "--max-tokens", str(b["max_tokens"]), "--max-update", str(self.max_update),
               "--save-dir", self.dir, "--no-epoch-checkpoints",
               "--log-format", "json", "--log-interval", str(b["log_interval"]),
               "--seed", str(b["seed"]), "--num-workers", "0")
        cmd += ["--share-all-embeddings"] if joined_vocabulary else []
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
        cmd = self.train_command()[len(fairseq_tool("train")):]
        for flag in ("--max-update", "--stop-time-hours", "--save-dir", "--user-dir"):
            if flag in cmd:
                i = cmd.index(flag)
                cmd = cmd[:i] + cmd[i + 2:]
        return hashlib.sha256(json.dumps(cmd).encode()).hexdigest()[:16]

    def limits(self) -> Dict:
        return {"max_update": self.max_update, "max_minutes": self.budget.get("max_minutes")}

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.dir, "checkpoint_last.pt")

    def done_info(self) -> Optional[Dict]:
        info = read_json(Path(self.dir) / "done.json", strict=True)
        if not info or not os.path.exists(self.checkpoint) or info.get("key") != self.key():
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
        plan = read_json(Path(self.dir) / "plan.json", strict=True)
        if plan is None:
            return "new"
        if plan.get("key") != self.key():
            return "stale"
        return "partial" if os.path.exists(self.checkpoint) else "started"


def set_params_or_skip(run) -> None:
    """``run.params``, the unique parameters of its model built (not trained) from its training
    command with the corpus's dictionaries, or the ``skip_reason`` why it cannot be built: an
    architecture not registered (not built yet), or flags its model refuses."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_shared.models.build import count_params

    if run.arch not in ARCH_MODEL_REGISTRY:
        run.skip_reason = (f"architecture '{run.arch}' is not registered (not built yet);"
                           " row skipped")
        return
    try:
        run.params = count_params(run.train_command()[len(fairseq_tool("train")):])
    except (Exception, SystemExit) as e:  # noqa: BLE001  bad flags for this model
        run.skip_reason = f"cannot build the model: {type(e).__name__}: {e}"


def make_plan(configs: List[Dict], budget: Dict, data: str, out: str,
              runs_dir: Optional[str] = None) -> List[Run]:
    """A :class:`Run` per configuration, its parameters counted (or its ``skip_reason``)."""
    import logging

    import fairseq_shared  # noqa: F401

    runs = [Run(cfg, budget, data, out, runs_dir) for cfg in configs]
    logging.disable(logging.WARNING)
    try:
        for run in runs:
            set_params_or_skip(run)
    finally:
        logging.disable(logging.NOTSET)
    return runs


def plan_run(config: Dict, seed: int, data: str, work: str, budget: Dict, progress=print) -> Run:
    """The :class:`Run` of ``config`` with ``seed``, under ``WORK/runs_s<seed>/<name>`` (its
    parameters counted)."""
    return make_plan([config], budget, data, os.path.join(work, f"out_s{seed}"),
                     runs_dir=os.path.join(work, f"runs_s{seed}"))[0]


def print_plan(runs: List[Run], budget: Dict, log=print):
    """The plan as a table: each configuration's depth, sharing, parameters and state."""
    log(f"budget '{budget['name']}': " + ", ".join(f"{k}={v}" for k, v in budget.items()
                                                  if k != "name"))
    log("| # | config | arch | N | M | strategy | scope | params | state |")
    log("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(runs, 1):
        p = f"{r.params:,}" if r.params else "-"
        log(f"| {i} | {r.name} | {r.arch} | {r.N} | {r.M} | {r.strategy} | {r.scope} | {p} | "
            f"{r.state()} |")
    for r in runs:
        if r.skip_reason:
            log(f"  skip {r.name}: {r.skip_reason}")
