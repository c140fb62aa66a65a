"""Training-step cost of several checkpoints, measured side by side in one process.

    OMP_NUM_THREADS=1 python results/archive/bible/bench_train_step.py --runs work/bible_runs \
        --configs vanilla,universal,cycle_rev_2L --baseline vanilla --out results/archive/bible/train_step.md

Each model (rebuilt from its checkpoint) takes the same real batches of the validation set
(label-smoothed cross-entropy, forward + backward + Adam step). Models are interleaved,
order rotated each round, so machine drift hits all alike; the ratio against the baseline is
the median of the per-round ratios. Training speed relative to vanilla is 1 / that ratio.
"""

import argparse
import os
import statistics
import time

import torch
from fairseq import checkpoint_utils
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
)

import fairseq_shared  # noqa: F401


def batches(task, max_tokens, count):
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    iterator = task.get_batch_iterator(
        dataset, max_tokens=max_tokens, seed=1, required_batch_size_multiple=1
    ).next_epoch_itr(shuffle=False)
    return [sample for _, sample in zip(range(count), iterator)]


def step_seconds(model, criterion, optimizer, samples):
    start = time.perf_counter()
    for sample in samples:
        optimizer.zero_grad()
        loss, _, _ = criterion(model, sample)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / len(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", required=True, help="folder with one <config>/checkpoint_last.pt each")
    parser.add_argument("--configs", required=True, help="comma-separated config names")
    parser.add_argument("--baseline", default="vanilla")
    parser.add_argument("--data", default=None, help="data-bin (default: from the checkpoint)")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the Markdown table here too")
    args = parser.parse_args()
    torch.manual_seed(1)

    names = args.configs.split(",")
    if args.baseline not in names:
        parser.error(f"--baseline {args.baseline} must be one of --configs: {names}")
    models, samples = {}, None
    for name in names:
        path = os.path.join(args.runs, name, "checkpoint_last.pt")
        overrides = {"data": args.data} if args.data else None
        [model], cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides)
        model.train()
        criterion = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-9)
        models[name] = (model, criterion, optimizer)
        if samples is None:
            samples = batches(task, args.max_tokens, args.batches)
    tokens = sum(s["ntokens"] for s in samples) / len(samples)

    for model, criterion, optimizer in models.values():  # warm-up
        step_seconds(model, criterion, optimizer, samples[:1])
    times = {name: [] for name in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            times[name].append(step_seconds(*models[name], samples))

    lines = [
        f"Training step (forward + backward + Adam) on {len(samples)} validation batches of "
        f"~{tokens:.0f} target tokens, {args.rounds} interleaved rounds, "
        f"{torch.get_num_threads()} thread(s); ratio = median of per-round ratios.",
        "",
        "| config | params | s / step (median) | target tokens/s | training speed vs "
        f"{args.baseline} |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in names:
        ratio = statistics.median(
            b / t for b, t in zip(times[args.baseline], times[name])
        )
        seconds = statistics.median(times[name])
        params = sum(p.numel() for p in models[name][0].parameters())
        lines.append(
            f"| {name} | {params:,} | {seconds:.3f} | {tokens / seconds:.0f} | x{ratio:.2f} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(table)


if __name__ == "__main__":
    main()
