"""Relaxed sharing, converted models and a learned pattern on the clean Bible split, measured
against the evidence runs (``results/bible_clean``, budget ``evidence``, same seed).

Three kinds of item, each writing ``RESULTS/runs/<item>_s<seed>.json`` (and hypotheses) the
moment it finishes, committed by the worker:

* **train**: a configuration of :data:`CONFIGS` trained from scratch like the evidence runs
  (cycle_rev N=2L/M=L with LoRA rank 8 and 32).
* **convert**: the evidence run ``vanilla_2L`` (same seed) converted to cycle_rev M=L
  (:mod:`fairseq_shared.tools.convert_sharing`, with LoRA rank R initialised from the SVD of each
  position's residual); test BLEU right after conversion, after ``FINETUNE_UPDATES`` updates
  of fine-tuning (``--finetune-from-model``: fresh optimizer and warm-up), and of the same
  map trained from scratch for as many updates (its kept ``checkpoint_*_K.pt``).
* **learned**: :mod:`fairseq_shared.tools.learn_sharing` (linear CKA of the layers' updates on the
  valid set, adjacent groups, M=L sets per stack) on that ``vanilla_2L`` checkpoint, then the
  proposed map trained from scratch like cycle_rev_2L.

A declaration on the run queue (:mod:`fairseq_shared.experiments.queue`): an item whose
inputs are not finished yet (the evidence run it converts or compares with) waits for them;
the worker goes on with the next.
"""

import os
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from fairseq_shared.experiments import queue
from fairseq_shared.experiments.configs import load_budget
from fairseq_shared.experiments.corpus import corpus_paths
from fairseq_shared.experiments.decode import decode_test
from fairseq_shared.experiments.milestones import checkpoint_at
from fairseq_shared.experiments.run_record import run_item

FINETUNE_UPDATES = 500  # a quarter of the evidence budget's 2,000 updates


def lora_flags(rank: int) -> List[str]:
    return [] if not rank else ["--encoder-share-lora-rank", str(rank),
                                "--decoder-share-lora-rank", str(rank)]


def cycle_rev_config(name: str, rank: int, **extra) -> Dict:
    """cycle_rev N=2L/M=L with LoRA rank ``rank`` in this suite's tables; ``extra`` overrides."""
    return {"name": name, "label": f"Cycle (rev), LoRA rank {rank}" if rank else "Cycle (rev)",
            "strategy": "cycle_rev", "N": "2L", "M": "L", "extra": lora_flags(rank),
            "tables": ["relaxed"], **extra}


#: (kind, name, settings) in the order workers take them.
ITEMS: List[Tuple[str, str, Dict]] = [
    ("train", "cycle_rev_2L_lora8", {"rank": 8}),
    ("convert", "convert_cycle_rev_r0", {"rank": 0, "scratch": ("evidence", "cycle_rev_2L")}),
    ("convert", "convert_cycle_rev_r8", {"rank": 8, "scratch": ("relaxed", "cycle_rev_2L_lora8")}),
    ("learned", "learned_2L", {}),
    ("train", "cycle_rev_2L_lora32", {"rank": 32}),
]
SOURCE = "vanilla_2L"  # the trained model that is converted and whose similarity is learned
# what each layer adds to the residual stream: output CKA saturates in a trained pre-LN stack
# (0.92-1.00 between all decoder layers of a pilot model; learn_sharing's docstring)
LEARNED_MEASURE = "cka_update"


# ---------------------------------------------------------------------------- inputs
def run_dir(work: str, name: str, seed: int) -> str:
    """Where :func:`runs.plan_run` puts a run of ``work`` (this suite's or the evidence's)."""
    return os.path.join(work, f"runs_s{seed}", name)


def source_checkpoint(dirs: Dict[str, str], seed: int) -> str:
    return os.path.join(run_dir(dirs["evidence_work"], SOURCE, seed), "checkpoint_last.pt")


def suite_dir(dirs: Dict[str, str], suite: str, what: str) -> str:
    """``dirs[what]`` (results or work) of this suite, or of the evidence runs."""
    return dirs[f"evidence_{what}" if suite == "evidence" else what]


def inputs(kind: str, settings: Dict, seed: int, dirs: Dict[str, str]) -> List[Tuple[str, Path]]:
    """(label, result file) of every run an item needs first."""
    runs = ([("evidence", SOURCE)] if kind in ("convert", "learned") else []) + \
        ([settings["scratch"]] if kind == "convert" else [])
    return [(f"{suite} {name}_s{seed}",
             queue.result_path(suite_dir(dirs, suite, "results"), name, seed))
            for suite, name in runs]


def missing_inputs(kind: str, settings: Dict, seed: int, dirs: Dict[str, str]) -> List[str]:
    """What an item still waits for (empty: it can run)."""
    return [label for label, path in inputs(kind, settings, seed, dirs) if not path.exists()]


def items(seeds: Sequence[int], dirs: Dict[str, str]) -> List[queue.Item]:
    """The queue's items: :data:`ITEMS` for every seed, each waiting for its inputs."""
    return [queue.Item(name, seed, kind, tuple(settings.items()),
                       tuple(str(p) for _, p in inputs(kind, settings, seed, dirs)))
            for seed in seeds for kind, name, settings in ITEMS]


# ---------------------------------------------------------------------------- items
def train(ctx: queue.Context, name: str, seed: int, config: Dict, overrides=()) -> Dict:
    """:func:`run_item` of ``config`` in this suite's work and results directories."""
    return run_item(name, seed, ctx.data, ctx.work, ctx.results, ctx.budget, overrides,
                    ctx.progress, config)


def run_train(item: queue.Item, ctx: queue.Context) -> Dict:
    return train(ctx, item.name, item.seed, cycle_rev_config(item.name, item.setting("rank")))


def run_convert(item: queue.Item, ctx: queue.Context) -> Dict:
    from fairseq_shared.tools import convert_sharing

    name, seed, dirs, data, progress = item.name, item.seed, ctx.extra, ctx.data, ctx.progress
    budget = load_budget(ctx.budget, [f"seed={seed}"])
    _, _, tgt, _ = corpus_paths(data)
    rank = item.setting("rank")
    source = source_checkpoint(dirs, seed)
    converted = os.path.join(dirs["work"], "converted", f"{name}_s{seed}.pt")
    os.makedirs(os.path.dirname(converted), exist_ok=True)
    changes = {f"{s}_{k}": v for s in ("encoder", "decoder") for k, v in
               (("share_strategy", "cycle_rev"), ("unique_layers", budget["L"]),
                ("share_lora_rank", rank or None))}
    progress(f"[relaxed] {name}_s{seed}: converting {source}")
    report = convert_sharing.convert_checkpoint(source, converted, changes)
    hyps = Path(dirs["results"]) / "hyps"
    after = decode_test(converted, data, budget, name, hyps / f"{name}_s{seed}.converted.{tgt}",
                        progress)
    ft_name = f"{name}_ft{FINETUNE_UPDATES}"
    config = cycle_rev_config(ft_name, rank, extra=lora_flags(rank) + [
        "--finetune-from-model", os.path.abspath(converted)])
    tuned = train(ctx, ft_name, seed, config, [f"max_update={FINETUNE_UPDATES}"])
    queue.write_result(queue.result_path(dirs["results"], ft_name, seed), tuned)
    suite, scratch_name = item.setting("scratch")
    scratch_ckpt = checkpoint_at(run_dir(suite_dir(dirs, suite, "work"), scratch_name, seed),
                                 FINETUNE_UPDATES)
    scratch = None
    if scratch_ckpt:
        scratch = decode_test(scratch_ckpt, data, budget, scratch_name,
                              hyps / f"{name}_s{seed}.scratch.{tgt}", progress)
        scratch.pop("decode_settings")
    after.pop("decode_settings")
    return {
        "name": name, "seed": seed, "kind": "convert", "rank": rank,
        "source": {"name": SOURCE, "checkpoint": source},
        "conversion": report, "after_conversion": after,
        "finetuned": {"name": ft_name, "updates": tuned["updates"], "test": tuned["test"],
                      "training_cpu_seconds": tuned["training_cpu_seconds"],
                      "params": tuned["params"]},
        "scratch_at_same_updates": {"name": scratch_name, "updates": FINETUNE_UPDATES,
                                    "checkpoint": scratch_ckpt, "test": scratch},
    }


def run_learned(item: queue.Item, ctx: queue.Context) -> Dict:
    from fairseq_shared.tools import learn_sharing

    name, seed, dirs, progress = item.name, item.seed, ctx.extra, ctx.progress
    budget = load_budget(ctx.budget, [f"seed={seed}"])
    source = source_checkpoint(dirs, seed)
    out = Path(dirs["results"]) / "learned" / f"{name}_s{seed}"
    progress(f"[relaxed] {name}_s{seed}: learning a {budget['L']}-set map from {source}")
    bin_dir = corpus_paths(ctx.data)[0]
    record = learn_sharing.learn_sharing(source, str(out), bin_dir, sets=budget["L"],
                                         measure=LEARNED_MEASURE)
    patterns = {s: record["stacks"][s]["patterns"]["adjacent"] for s in ("encoder", "decoder")}
    config = cycle_rev_config(name, 0, label="Learned map (update CKA, adjacent)",
                              encoder_strategy=patterns["encoder"],
                              decoder_strategy=patterns["decoder"])
    result = train(ctx, name, seed, config)
    result["learned"] = {"patterns": patterns, "flags": record["flags"],
                         "files": str(out.relative_to(dirs["results"]))}
    return result


RUNNERS = {"train": run_train, "convert": run_convert, "learned": run_learned}


def relaxed_commit(item: queue.Item, result: Dict, ctx: queue.Context) -> Tuple[List[Path], str]:
    """Hypotheses, the fine-tuned run's file and the learned map's files, and the message."""
    root, name, seed = Path(ctx.extra["results"]), item.name, item.seed
    return ([*sorted(root.glob(f"hyps/{name}*_s{seed}*")),
             *sorted(root.glob(f"runs/{name}_ft*_s{seed}.json")),
             *sorted(root.glob(f"learned/{name}_s{seed}/*"))],
            f"relaxed: {item.id} finished")


SUITE = queue.Suite("relaxed", run=lambda item, ctx: RUNNERS[item.kind](item, ctx),
                    commit_files=relaxed_commit)

