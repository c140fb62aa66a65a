"""The budget curves: each core configuration trained far past the evidence budget, in stages
(:mod:`harness.milestones`); a declaration on the run queue
(:mod:`harness.queue`).

Each item of :data:`QUEUE` is one configuration with one seed under the ``budget_curve``
budget: the evidence recipe trained to each of ``milestones`` (1,000 to 8,000 updates) or to
its early stop. At each milestone the test set is decoded from that update's checkpoint, and
its record (:func:`milestone_path`) and hypotheses are written (with ``--commit`` committed) at
once: a stopped worker loses at most the updates since the last checkpoint, never a finished
milestone. The final stage averages the last ``average_last`` interval checkpoints and decodes
them (``RESULTS/runs/<name>_s<seed>.json``, ``RESULTS/hyps/<name>_s<seed>_avg.<tgt>``).
:mod:`harness.budget_report` renders tables and plots from these files.

A budget without ``milestones`` (``evidence``: the papers' comparisons at 2,000 updates,
``results/bible_clean``) trains each item in one go and decodes its last checkpoint once
(:func:`~harness.run_record.run_item`); any configuration of
:data:`configs.CONFIGS` may be queued under it.
"""

import glob
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from harness import milestones, queue, run_record
from harness.configs import CONFIGS, load_budget, row_fields, select_configs, staged
from harness.cpu_clock import cpu_per_update, read_cpu_log
from harness.decode import bleu_evaluation
from harness.run_record import checkpoint_updates, record_run, run_curve
from harness.training import with_cpu
from harness.runs import plan_run

# Takase & Kiyono's and Kasai et al.'s rows with seed 1; the second seed of the three the
# issue asks two of (3+3, cycle_rev, the shallow decoder); one seed of the rest; last, the
# second seed of vanilla 6+6, which the issue asks "as the budget allows".
CORE = ["vanilla", "cycle_rev_2L", "vanilla_2L", "vanilla_2L_dec1"]
TWO_SEEDS = ["vanilla", "cycle_rev_2L", "vanilla_2L_dec1"]
REST = ["vanilla_dec2L", "san_dec2L", "attn_shared"]
# One Wide FFN (the FFN issue): the shared wide encoder FFN, and the decoder-FFN-free row
ONE_WIDE_FFN: List[str] = ["one_wide_ffn", "nodec_ffn"]
# The one-seed rows in an order that packs two runs into a stretch of about 150 worker-minutes
# (results/bible_budget/README.md, the reorder of 2026-12-02): a short run beside each long one.
ONE_SEED = ["attn_shared", "vanilla_dec2L", "nodec_ffn", "san_dec2L", "one_wide_ffn"]
QUEUE: List[Tuple[str, int]] = ([(n, 1) for n in CORE] + [(n, 2) for n in TWO_SEEDS]
                                + [(n, 1) for n in ONE_SEED] + [("vanilla_2L", 2)])
# Issue 35: the 12+1 shared deep encoder on raw data, and the students of the distilled corpus
# (its teacher: vanilla_2L s1, the committed model with the best valid loss)
DISTILLATION = ["cycle_rev_4L_dec1", "vanilla_2L_dec1_distilled", "cycle_rev_4L_dec1_distilled",
                "vanilla_distilled"]
# Issue 55: at cycle_rev 6+6/3's size, narrower instead of shared, and shared layers told their
# depth (untied norms and biases; LoRA rank 8); queued by name in the order of
# results/bible_budget/PLAN_55.md
FIXED_SIZE = ["vanilla_2L_narrow", "cycle_rev_2L_depthcond", "cycle_rev_2L_lora8"]
NAMES = CORE + REST + ONE_WIDE_FFN + DISTILLATION + FIXED_SIZE


def parse_queue(text: Optional[str], budget: str = "budget_curve",
                overrides: Sequence[str] = ()) -> List[Tuple[str, int]]:
    """``name:seed,name:seed`` -> items; None -> :data:`QUEUE`. A staged budget takes the
    configurations of :data:`NAMES`, one without milestones any of :data:`configs.CONFIGS`;
    unknown names and missing seeds are refused naming ``--queue``."""
    if not text:
        return list(QUEUE)
    known = NAMES if staged(load_budget(budget, overrides)) else [c["name"] for c in CONFIGS]
    items = []
    for part in text.split(","):
        name, _, seed = part.strip().partition(":")
        if name not in known:
            raise SystemExit(f"--queue: unknown configuration '{name}'; known: {', '.join(known)}")
        if not seed.isdigit():
            raise SystemExit(f"--queue: '{part}' needs a seed, as in {name}:1")
        items.append((name, int(seed)))
    return items


def patience(config: Dict, budget: Dict) -> int:
    """The budget's early stop, none for a distilled student: it learns the teacher's outputs,
    not the real references its valid loss is measured on, and that loss flattens early (6+1
    distilled: 7.10 bits at 4,000 updates, 7.05-7.09 to 6,100, where the rule stopped it), so
    the students train to the budget their raw twins are compared at."""
    return 0 if config.get("data") == "distilled" else int(budget.get("patience") or 0)


def kept_model_path(work: str, name: str, seed: int) -> Path:
    """The averaged final model of a run, weights only, kept in the work directory for a
    frontier run on this machine (never committed: main takes no more model binaries; the 13
    committed ones are under ``RESULTS/models/``)."""
    return Path(work) / "models" / f"{queue.item_id(name, seed)}.pt"


def milestone_path(results: str, name: str, seed: int, k: int) -> Path:
    return Path(results) / "milestones" / f"{queue.item_id(name, seed)}_u{k}.json"


def milestone_record(run, item: queue.Item, k: int, data: str, budget: Dict, results: str,
                     progress) -> Dict:
    """Decode the checkpoint kept at ``k`` updates (else the last); the milestone's record,
    with the run's curve as the run holds it and the row fields of :func:`configs.row_fields`."""
    found = sorted(glob.glob(os.path.join(run.dir, f"checkpoint_*_{k}.pt")))
    checkpoint = found[-1] if found else run.checkpoint
    test = bleu_evaluation(data, budget, results, item.name, item.seed, progress,
                           checkpoint=checkpoint, hyps=f"_u{k}")(run, {})
    costs, estimated = cpu_per_update(read_cpu_log(os.path.join(run.dir, "cpu.jsonl")), k)
    curve = [p for p in with_cpu(run_curve(run), costs) if p["update"] <= k]
    point = next((p for p in curve if p["update"] == k), {})
    record = {"name": item.name, "seed": item.seed, "update": k, "params": run.params,
              "valid_loss": point.get("valid_loss"), "valid_nll_loss": point.get("valid_nll_loss"),
              "train_seconds": point.get("train_seconds"),
              "train_cpu_seconds": round(sum(costs), 1) if costs else None,
              "cpu_estimated_updates": estimated, "checkpoint": os.path.basename(checkpoint),
              "curve": curve, **test, **row_fields(run.config, budget)}
    if budget.get("average_milestones"):
        record["average"] = averaged_evaluation(run, item, k, data, budget, results, progress)
    return record


def averaged_path(run, budget: Dict, k: int) -> str:
    return os.path.join(run.dir, f"average_last{int(budget['average_last'])}_u{k}.pt")


def averaged_evaluation(run, item: queue.Item, k: int, data: str, budget: Dict, results: str,
                        progress, hyps: Optional[str] = None) -> Dict:
    """The average of the last ``average_last`` interval checkpoints up to update ``k``,
    decoded (hypotheses ``_u<k>_avg``, or ``hyps``) and validated: the final stage's
    measurement at any milestone, so that a long run's 8,000-update milestone stands beside
    an 8,000-update run's final model."""
    from harness.corpus import corpus_paths
    from harness.valid_loss import valid_loss

    averaged = averaged_path(run, budget, k)
    inputs = milestones.average_last(run.dir, int(budget["average_last"]), k, averaged)
    test = bleu_evaluation(data, budget, results, item.name, item.seed, progress,
                           checkpoint=averaged,
                           hyps=hyps if hyps is not None else f"_u{k}_avg")(run, {})
    loss = valid_loss(averaged, corpus_paths(data)[0], threads=int(budget["threads"]))
    return {"of": [os.path.basename(p) for p in inputs], "valid_loss": loss["loss"],
            "valid_nll_loss": loss.get("nll_loss"), **test}


def run_item(name: str, seed: int, data: str, work: str, results: str,
             budget_name: str = "budget_curve", overrides: Sequence[str] = (), progress=print,
             commit: Callable[[List[Path], str], None] = lambda paths, message: None) -> Dict:
    """Train and record one item; ``commit(paths, message)`` is the queue's committer
    (:meth:`queue.Context.commit`), which each milestone's files go through."""
    budget = load_budget(budget_name, [*overrides, f"seed={seed}"])
    if not staged(budget):  # one stage: the last checkpoint decoded once
        return run_record.run_item(name, seed, data, work, results, budget_name, overrides,
                                   progress)
    config = select_configs(CONFIGS, name, None)[0]
    run = plan_run(config, seed, data, work, budget, progress)
    if run.skip_reason:
        raise RuntimeError(f"{queue.item_id(name, seed)}: {run.skip_reason}")
    item = queue.Item(name, seed)
    stages = milestones.parse_milestones(budget["milestones"], budget["max_update"])

    replaced: List[int] = []

    def commit_milestone(k: int, record: Dict) -> None:
        again = "; trained again: the training of the record it replaces is lost" \
            if k in replaced else ""
        commit(milestone_files(results, record), f"budget: {item.id} at {k} updates (BLEU "
                                                 f"{record['test']['bleu']:.2f}{again})")

    def at_milestone(k: int) -> Dict:
        record = milestone_record(run, item, k, data, budget, results, progress)
        queue.write_result(milestone_path(results, name, seed, k), record)
        progress(f"[budget] {item.id} at {k} updates: BLEU {record['test']['bleu']:.2f}")
        commit_milestone(k, record)
        return record

    def done(k: int) -> Optional[Dict]:
        record = queue.read_json(milestone_path(results, name, seed, k))
        if record and checkpoint_updates(run) < k:
            # its training did not survive (another machine): this run starts again, and
            # measures the milestone again rather than mix two trainings in one record
            progress(f"[budget] {item.id}: the {k}-update milestone's training is lost "
                     f"({checkpoint_updates(run)} updates here); it is measured again")
            replaced.append(k)
            return None
        if record:
            commit_milestone(k, record)  # written by a worker killed before its commit
        return record

    stages_run = milestones.run_stages(run, stages, patience(config, budget), at_milestone, done,
                                       progress)

    def final(run, result: Dict) -> Dict:
        upto = stages_run["stopped_at"] or run.max_update
        last = stages_run["milestones"][-1] if stages_run["milestones"] else {}
        average = dict(last.get("average") or {}) if last.get("update") == upto else {}
        if not average:  # else the last milestone's average is the final model
            average = averaged_evaluation(run, item, upto, data, budget, results, progress,
                                          hyps="_avg")
        kept = milestones.keep_weights(averaged_path(run, budget, upto),
                                       str(kept_model_path(work, name, seed)))
        return {"stopped_at": stages_run["stopped_at"], "average_of": average.pop("of"),
                **({"milestones_trained_again": replaced} if replaced else {}),
                "model_kept": os.path.abspath(kept),
                "average_valid_loss": average.pop("valid_loss"),
                "average_valid_nll_loss": average.pop("valid_nll_loss"),
                "milestones": [milestone_summary(m) for m in stages_run["milestones"]],
                **average}

    result = record_run(run, item, config.get("label", name), final, progress)
    result.update({"tables": ["budget"], "decoder_N": run.dec_N, "data": os.path.abspath(data),
                   "run_dir": os.path.abspath(run.dir), **row_fields(config, budget)})
    return result


def milestone_summary(record: Dict) -> Dict:
    """A milestone in its run's record: update, valid loss, CPU, BLEU/chrF (and the same of
    its averaged model, where there is one)."""
    out = {**{k: record[k] for k in ("update", "valid_loss", "train_cpu_seconds")},
           "bleu": record["test"]["bleu"], "chrf": record["test"]["chrf"]}
    if record.get("average"):
        avg = record["average"]
        out["average"] = {"valid_loss": avg["valid_loss"], "bleu": avg["test"]["bleu"],
                          "chrf": avg["test"]["chrf"]}
    return out


def milestone_files(results: str, record: Dict) -> List[Path]:
    """A milestone's record and hypotheses (the corpus snapshot the tables read them with is
    committed by the worker before its first run, ``queue_cli.main``)."""
    files = [milestone_path(results, record["name"], record["seed"], record["update"]),
             Path(results) / record["test"]["hypotheses"]]
    if record.get("average"):
        files.append(Path(results) / record["average"]["test"]["hypotheses"])
    return files


def budget_commit(item: queue.Item, result: Dict, ctx: queue.Context) -> Tuple[List[Path], str]:
    """The averaged model's hypotheses and, should one be left uncommitted, every milestone
    (the model itself stays in the work directory: no model binaries in main)."""
    hyps = [Path(ctx.results) / result["test"]["hypotheses"]] if "test" in result else []
    for path in sorted((Path(ctx.results) / "milestones").glob(f"{item.id}_u*.json")):
        hyps += milestone_files(ctx.results, queue.read_record(path))
    averaged = "average of the last checkpoints: " if "average_of" in result else ""
    return hyps, (f"budget: {item.id} finished ({averaged}BLEU {result['test']['bleu']:.2f}, "
                  f"{result['updates']} updates)" if hyps else f"budget: {item.id} finished")


SUITE = queue.Suite(
    "budget",
    run=lambda item, ctx: run_item(item.name, item.seed, ctx.data, ctx.work, ctx.results,
                                   ctx.budget, ctx.overrides, ctx.progress, ctx.commit),
    commit_files=budget_commit)
