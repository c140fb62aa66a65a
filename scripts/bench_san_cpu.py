#!/usr/bin/env python
"""Contention-robust decoding timing of SAN vs vanilla: fairseq's SequenceGenerator with
its incremental cache, timed by the process's CPU time (time.process_time) with one torch
thread, and by wall time, over many short interleaved rounds.

Why: on a shared 2-core machine other jobs make wall-clock passes vary by 10x (see
results/san_speed.md); one thread's CPU time counts only this process's work.

    python scripts/bench_san_cpu.py --data work/bible/bin --models vanilla=A.pt,san=B.pt \\
        [--sentences 16] [--large-batch 16] [--rounds 5] [--forced-len 30] --out OUT.json
    python scripts/bench_san_cpu.py --render OUT.json     # its Markdown table again

Writes OUT.json after every cell and OUT.md (the table) at the end.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

import fairseq_shared  # noqa: F401
from fairseq import checkpoint_utils
from fairseq.sequence_generator import SequenceGenerator
from fairseq_shared.timing import select_ids


def batches(task, n, bsz):
    ds = task.dataset("test")
    ids = select_ids(len(ds), n).tolist()
    return [ds.collater([ds[i] for i in ids[k:k + bsz]]) for k in range(0, n, bsz)]


def run(model, task, bs, beam, forced_len):
    kw = dict(beam_size=beam, max_len_a=1.2, max_len_b=10)
    if forced_len:
        kw = dict(beam_size=beam, max_len_a=0, max_len_b=forced_len, min_len=forced_len)
    gen = SequenceGenerator([model], task.target_dictionary, **kw)
    tokens = sents = 0
    c0, w0 = time.process_time(), time.perf_counter()
    with torch.no_grad():
        for b in bs:
            out = gen.forward({"net_input": {k: b["net_input"][k] for k in ("src_tokens", "src_lengths")}})
            tokens += sum(int(h[0]["tokens"].numel()) for h in out)
            sents += len(out)
    return time.process_time() - c0, time.perf_counter() - w0, tokens, sents


def markdown(doc) -> str:
    """One row per cell and model: CPU tok/s median (min-max), sent/s, ratios to the baseline."""
    lines = [f"Command: `{doc['command']}`", "",
             "| decoding | beam | batch | model | out tokens | tok/s (CPU) | sent/s (CPU) | "
             "tok/s vs baseline | sent/s vs baseline | wall-time ratio |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for cell in doc["cells"]:
        decoding = f"forced {cell['forced_len']}" if cell["forced_len"] else "free"
        for name, m in cell["models"].items():
            tok = m["cpu_tok_s"]
            lines.append(
                f"| {decoding} | {cell['beam']} | {cell['batch']} | {name} | {m['tokens']} | "
                f"{statistics.median(tok):.1f} ({min(tok):.1f}-{max(tok):.1f}) | "
                f"{statistics.median(m['cpu_sent_s']):.2f} | x{m['cpu_ratio']:.2f} | "
                f"x{m['cpu_sent_ratio']:.2f} | x{m['wall_ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--render":
        with open(sys.argv[2]) as f:
            print(markdown(json.load(f)), end="")
        return
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--models", required=True, help="name=ckpt,... ; the first is the baseline")
    p.add_argument("--sentences", type=int, default=16)
    p.add_argument("--large-batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--forced-len", type=int, default=30)
    p.add_argument("--forced-only", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    command = "python " + " ".join(sys.argv)
    torch.set_num_threads(1)
    models = {}
    task = None
    for item in a.models.split(","):
        name, path = item.split("=")
        ms, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": a.data})
        m = ms[0].eval()
        m.prepare_for_inference_(cfg)
        models[name] = m
    task.load_dataset("test")
    names = list(models)
    cells = []
    for forced in ((a.forced_len,) if a.forced_only else (None, a.forced_len)):
        for beam in (1, 4):
            for bsz in (1, a.large_batch):
                bs = batches(task, a.sentences, bsz)
                for m in names:  # warm-up
                    run(models[m], task, bs[:1], beam, forced)
                res = {m: [] for m in names}
                for r in range(a.rounds):
                    order = names[r % len(names):] + names[: r % len(names)]
                    for m in order:
                        res[m].append(run(models[m], task, bs, beam, forced))
                cell = {"beam": beam, "batch": bsz, "forced_len": forced, "sentences": a.sentences,
                        "rounds": a.rounds, "models": {}}
                base = res[names[0]]
                for m in names:
                    cpu = [x[0] for x in res[m]]
                    wall = [x[1] for x in res[m]]
                    tok, sen = res[m][0][2], res[m][0][3]
                    cell["models"][m] = {
                        "tokens": tok, "sentences": sen,
                        "cpu_tok_s": [tok / c for c in cpu], "wall_tok_s": [tok / w for w in wall],
                        "cpu_sent_s": [sen / c for c in cpu],
                        "cpu_ratio": statistics.median(b[0] / x[0] * tok / b[2] for x, b in zip(res[m], base)),
                        "wall_ratio": statistics.median(b[1] / x[1] * tok / b[2] for x, b in zip(res[m], base)),
                        "cpu_sent_ratio": statistics.median(b[0] / x[0] * sen / b[3] for x, b in zip(res[m], base)),
                    }
                    c = cell["models"][m]
                    print(f"beam {beam} batch {bsz} forced {forced} {m}: cpu tok/s median "
                          f"{statistics.median(c['cpu_tok_s']):.1f} ({min(c['cpu_tok_s']):.1f}-{max(c['cpu_tok_s']):.1f}) "
                          f"ratio x{c['cpu_ratio']:.2f}; wall ratio x{c['wall_ratio']:.2f}; tokens {tok}", flush=True)
                cells.append(cell)
                with open(a.out, "w") as f:
                    json.dump({"command": command, "cells": cells}, f, indent=1)
    with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
        f.write(markdown({"command": command, "cells": cells}))


if __name__ == "__main__":
    main()
