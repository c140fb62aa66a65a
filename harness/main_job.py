"""The main job (``make demo``): Bible es->en, a vanilla and a parameter-shared model of the
same size, decoded with timing, one table.

    .venv/bin/python -m harness.main_job [--updates 300] [--threads 2] ...

Stages, each restartable (re-running skips what is done and valid; a killed training resumes
from fairseq's ``checkpoint_last.pt``):

1. setup    check the environment (torch, fairseq, this package) and print the budget;
2. corpus   ``python -m fairseq_shared.cli.bible --out <work>/bible`` (its own stages skip
            what is done and valid), or ``--data`` a prepared corpus;
3. train    a suite of the run queue (:mod:`harness.queue`): vanilla (L+L
            layers), then cycle_rev (2L+2L layers over L parameter sets per stack: the same
            parameter count), capped at the updates vanilla reached (``equal_updates``); one
            record per model in ``<work>/main_job/runs/``;
4. decode   both models with fairseq's generator, interleaved timed passes (:mod:`timing`);
5. table    parameters, BLEU, chrF, decoding tokens/s (+ what was decoded), also written to
            ``<work>/main_job/main_job.md``.

Budgets come from flags or environment variables (flag wins; each flag below names its
variable, ``FS_BUDGET`` the preset and ``FS_WORK`` the work directory; defaults and meanings:
docs/main_job.md). The defaults aim at about 30 minutes on 2 CPU cores.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict

from harness import queue
from harness.corpus import corpus_ready

ENV = {  # flag -> (environment variable, budget key, type)
    "dim": ("FS_DIM", "dim", int), "layers": ("FS_LAYERS", "L", int),
    "updates": ("FS_UPDATES", "max_update", int), "minutes": ("FS_MINUTES", "max_minutes", float),
    "threads": ("FS_THREADS", "threads", int), "max_tokens": ("FS_MAX_TOKENS", "max_tokens", int),
    "decode_sentences": ("FS_DECODE_SENTENCES", "subset", int),
    "repeats": ("FS_REPEATS", "repeats", int),
    "decode_threads": ("FS_DECODE_THREADS", "decode_threads", int),
}
CONFIG_NAMES = ("vanilla", "cycle_rev_2L")


def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", default=os.environ.get("FS_BUDGET", "demo"),
                   help="budget preset (experiments.configs.BUDGETS) the values below start from (default demo)")
    p.add_argument("--work", default=os.environ.get("FS_WORK", "work"),
                   help="work directory (corpus in <work>/bible, runs in <work>/main_job)")
    p.add_argument("--data", default=None, help="use this prepared corpus (bin/, raw/, spm.model) "
                   "instead of building the Bible corpus")
    for flag, (env, key, typ) in ENV.items():
        p.add_argument(f"--{flag.replace('_', '-')}", type=typ, default=None,
                       help=f"budget '{key}' (env {env})")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    return p


def make_budget(args):
    from harness.configs import load_budget

    budget = load_budget(args.budget)
    for flag, (env, key, typ) in ENV.items():
        value = getattr(args, flag)
        if value is None and os.environ.get(env, "") != "":
            value = typ(os.environ[env])
        if value is not None:
            budget[key] = value
    if budget.get("subset") == 0:
        budget["subset"] = None
    budget["ffn"] = 4 * budget["dim"] if (args.dim or os.environ.get("FS_DIM")) else budget["ffn"]
    return budget


def stage(k, name, t0):
    print(f"\n=== stage {k}/5: {name} (elapsed {(time.time() - t0) / 60:.1f} min) ===", flush=True)


def plan(data: str, out: str, budget: Dict, names=CONFIG_NAMES):
    """The :class:`~harness.runs.Run` of the main job's models (parameters
    counted), under ``<out>/train/<name>``."""
    from harness.configs import CONFIGS, select_configs
    from harness.runs import make_plan

    return make_plan(select_configs(CONFIGS, ",".join(names), None), budget, data, out,
                     runs_dir=os.path.join(out, "train"))


def items(out: str, seed: int):
    """vanilla, then cycle_rev, which waits for vanilla's record (its update cap)."""
    first = queue.Item(CONFIG_NAMES[0], seed)
    return [first, queue.Item(CONFIG_NAMES[1], seed, needs=(
        str(queue.result_path(out, first.name, seed)),))]


def train_item(item: queue.Item, ctx: queue.Context) -> Dict:
    """The queue's ``run`` hook: train (or finish) one model and return its record; with
    ``equal_updates``, cycle_rev's limit is the updates vanilla reached within its time cap."""
    from harness.run_record import record_run

    budget = ctx.extra["budget"]
    run = plan(ctx.data, ctx.results, budget, [item.name])[0]
    if budget.get("equal_updates") and item.needs:
        reached = (queue.read_json(Path(item.needs[0])) or {}).get("updates")
        if reached and reached < run.max_update:
            ctx.progress(f"[main_job] {run.name}: max_update {run.max_update} -> {reached} "
                         "(equal_updates: what vanilla reached within its time cap)")
            run.max_update = reached
    result = record_run(run, item, run.config.get("label", run.name), lambda run, result: {},
                        ctx.progress)
    return {**result, "checkpoint": os.path.abspath(run.checkpoint)}


SUITE = queue.Suite("main_job", run=train_item,
                    commit_files=lambda item, result, ctx: ([], f"main_job: {item.id}"))


def train_models(data: str, out: str, budget: Dict, progress=print) -> Dict[str, Dict]:
    """Stage 3 on the run queue: ``{name: record}`` of vanilla and cycle_rev (a model with a
    record is skipped; a killed training resumes)."""
    ctx = queue.Context(data, out, out, budget["name"], progress=progress, extra={"budget": budget})
    todo = items(out, int(budget["seed"]))
    for item in todo:
        done = queue.read_json(queue.result_path(out, item.name, item.seed))
        if done:
            progress(f"[main_job] {item.name}: already trained ({done['updates']} updates); "
                     "skipped")
    queue.work(SUITE, todo, ctx)
    failed = queue.failed_items(todo, ctx)
    if failed:
        raise SystemExit(f"main job: training failed, see {queue.failure_path(out, failed[0].id)}")
    records = {i.name: queue.read_json(queue.result_path(out, i.name, i.seed)) for i in todo}
    if not all(records.values()):
        raise SystemExit(f"main job: {out} is being trained by another main job; wait for it")
    return records


def run_main_job(data: str, out: str, budget: Dict, progress=print) -> Dict:
    """Stages 3-5: train (queue), decode both models in one interleaved timing run (cached),
    tabulate; returns ``{"records", "decode", "rows", "lookup", "table"}``."""
    from harness.decode import decode_all, heldout_baseline
    from harness.tables import main_job_rows, main_job_table

    records = train_models(data, out, budget, progress)
    decode = decode_all({n: r["checkpoint"] for n, r in records.items()}, budget, data, out,
                        progress)
    rows = main_job_rows(records, decode)
    lookup = heldout_baseline(data, budget, decode, out, rows)
    table = main_job_table(rows, decode, lookup, budget)
    Path(out, "main_job.md").write_text(table, encoding="utf-8")
    return {"records": records, "decode": decode, "rows": rows, "lookup": lookup, "table": table}


def main(argv=None):
    t0 = time.time()
    args = build_parser().parse_args(argv)
    from fairseq_shared.fairseq_commands import terminate_on_sigterm

    terminate_on_sigterm()
    stage(1, "setup", t0)
    import torch

    import fairseq
    import fairseq_shared
    from harness.runs import print_plan

    budget = make_budget(args)
    os.environ.setdefault("OMP_NUM_THREADS", str(budget["threads"]))
    torch.set_num_threads(int(budget["threads"]))
    print(f"torch {torch.__version__}, fairseq {fairseq.__version__}, fairseq_shared "
          f"{fairseq_shared.__version__}, {os.cpu_count()} CPUs, using {budget['threads']} threads",
          flush=True)
    print("budget: " + ", ".join(f"{k}={v}" for k, v in budget.items()), flush=True)

    stage(2, "corpus", t0)
    data = args.data or os.path.join(args.work, "bible")
    cmd = [sys.executable, "-m", "fairseq_shared.cli.bible", "--out", data]
    if args.data:
        if not corpus_ready(data):
            raise SystemExit(f"--data {data}: not a prepared corpus (needs bin/, raw/, spm.model)")
        print(f"using the prepared corpus {data}", flush=True)
    elif args.dry_run:
        state = "present" if corpus_ready(data) else "missing"
        print(f"corpus {state}; would run (its stages skip what is done): {' '.join(cmd)}",
              flush=True)
    else:
        # the corpus builder checks each of its stages (parameters and outputs) and skips
        # the ones that are done, so it is always run
        print("running: " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        if not corpus_ready(data):
            raise SystemExit(f"corpus preparation finished but {data} is incomplete")

    out = os.path.join(args.work, "main_job")
    if args.dry_run:
        if corpus_ready(data):
            print_plan(plan(data, out, budget), budget)
        print("dry run: nothing trained", flush=True)
        return 0
    stage(3, "train (vanilla, then cycle_rev) and 4: decode", t0)
    result = run_main_job(data, out, budget, lambda m: print(m, flush=True))

    stage(5, "table", t0)
    print(result["table"], flush=True)
    print(f"total {(time.time() - t0) / 60:.1f} min; records in {out}/runs/", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
