#!/usr/bin/env python
"""Decoding speed of SAN (attention-weight sharing) against a vanilla model of the same size.

    python results/archive/san/bench_san.py --data work/bible \\
        --vanilla work/san/vanilla/checkpoint_last.pt --san work/san/san/checkpoint_last.pt \\
        --out results/archive/san/san_speed.md [--threads 2] [--repeats 3] [--subset-small 60] \\
        [--subset-large 300] [--large-batch 64]

* The SAN checkpoint is trained with ``--san-cross-reuse output`` (the default). Its
  ``context`` twin (each encoder-decoder follower with its own output projection) is made
  with :func:`convert_checkpoint`, the follower projections starting as copies of the
  leader's, so its translations are identical and only the extra projection is timed.
* Grid: beam 1 and 4 x batch 1 and ``--large-batch``, fairseq's generator with its
  incremental (attention) cache, ``fairseq_shared.timing.benchmark``: warm-up, then
  ``--repeats`` timed passes interleaved across models, median and min-max of tokens/s,
  sentences/s, ratio = median of per-round ratios (same run). Batch-1 cells decode
  ``--subset-small`` sentences, large-batch cells ``--subset-large`` (evenly spaced ids).
* The same grid with every model forced to the reference lengths (forced decoding).
* BLEU: the full test set, beam 4 (lenpen 1.0), one pass.
* Key/value cache per token: counted from fairseq's incremental state after decoding.
"""

import argparse
import json
import os
import shlex
import sys
import time

import torch


import fairseq_shared  # noqa: F401
from fairseq_shared.tools.convert_policy import convert_checkpoint
from fairseq_shared.timing import benchmark


def cache_per_token(path: str, data: str, bsz: int = 8, tgt_len: int = 20):
    """Bytes of fairseq's incremental state per target token (self-attention caches,
    per hypothesis) and per source token (encoder-decoder caches, per sentence)."""
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path])
    model = models[0].eval()
    task.load_dataset("test")
    ds = task.dataset("test")
    batch = ds.collater([ds[i] for i in range(bsz)])
    net = batch["net_input"]
    src_tokens = net["src_tokens"]
    src_len = src_tokens.size(1)
    prev = batch["net_input"]["prev_output_tokens"][:, :tgt_len]
    T = prev.size(1)
    state = {}
    with torch.no_grad():
        enc = model.encoder(src_tokens, src_lengths=net["src_lengths"])
        for t in range(T):
            model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
    self_bytes = cross_bytes = 0
    for layer in model.decoder.layers:
        for k, v in layer.self_attn._get_input_buffer(state).items():
            if v is not None and k in ("prev_key", "prev_value"):
                self_bytes += v.numel() * v.element_size()
        ea = layer.encoder_attn
        if ea is not None and hasattr(ea, "_get_input_buffer"):
            for k, v in ea._get_input_buffer(state).items():
                if v is not None and k in ("prev_key", "prev_value"):
                    cross_bytes += v.numel() * v.element_size()
    return {
        "self_bytes_per_target_token": self_bytes / (bsz * T),
        "cross_bytes_per_source_token": cross_bytes / (bsz * src_len),
        "decoder": model.decoder.describe_san() if hasattr(model.decoder, "describe_san") else "",
    }


def cell(models, data, beam, batch, subset, repeats, threads, force=None, warmup_batches=None):
    args = ["--beam", str(beam), "--lenpen", "1.0", "--batch-size", str(batch), "--cpu",
            "--gen-subset", "test", "--max-len-a", "1.2", "--max-len-b", "10"]
    t0 = time.time()
    rep = benchmark(models, data, args, baseline="vanilla", warmup=1,
                    warmup_batches=warmup_batches, repeats=repeats, subset=subset,
                    threads=threads, force=force, progress=lambda s: print(s, flush=True))
    return {"beam": beam, "batch": batch, "subset": subset, "force": force,
            "seconds": time.time() - t0, "rows": rep.rows(), "settings": rep.settings,
            "passes": {m.name: [p.__dict__ for p in m.passes] for m in rep.models}}


def fmt_cell(c, models):
    rows = {r["model"]: r for r in c["rows"]}
    out = []
    for name in models:
        r = rows[name]
        out.append(
            f"| {c['beam']} | {c['batch']} | {r['sentences']} | {name} | "
            f"{r['tokens_per_s_median']:.1f} ({r['tokens_per_s_min']:.1f}-{r['tokens_per_s_max']:.1f}) | "
            f"{r['sentences_per_s_median']:.2f} | x{r['speed_vs_baseline']:.2f} | "
            f"x{r['sent_speed_vs_baseline']:.2f} | {r['output_tokens']} |"
        )
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="work/bible")
    p.add_argument("--vanilla", required=True)
    p.add_argument("--san", required=True)
    p.add_argument("--out", default="results/archive/san/san_speed.md")
    p.add_argument("--json", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--subset-small", type=int, default=60)
    p.add_argument("--subset-large", type=int, default=300)
    p.add_argument("--large-batch", type=int, default=64)
    p.add_argument("--skip-bleu", action="store_true")
    p.add_argument("--skip-forced", action="store_true")
    p.add_argument("--forced-beams", default="1,4", help="beams of the forced-length grid")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    command = "python " + " ".join(shlex.quote(x) for x in sys.argv)
    context = os.path.join(os.path.dirname(a.san), "checkpoint_context.pt")
    convert_checkpoint(a.san, context, cross_reuse="context")
    models = {"vanilla": a.vanilla, "san_output": a.san, "san_context": context}
    names = list(models)
    results = {"command": command, "models": models, "cells": [], "forced": []}

    results["cache"] = {n: cache_per_token(pth, a.data) for n, pth in models.items()}
    for beam in (1, 4):
        for batch, subset in ((1, a.subset_small), (a.large_batch, a.subset_large)):
            results["cells"].append(cell(models, a.data, beam, batch, subset, a.repeats, a.threads,
                                         warmup_batches=3))
    if not a.skip_forced:
        for beam in [int(b) for b in a.forced_beams.split(",")]:
            for batch, subset in ((1, a.subset_small), (a.large_batch, a.subset_large)):
                results["forced"].append(cell(models, a.data, beam, batch, subset, a.repeats,
                                              a.threads, force="reference", warmup_batches=3))
    if not a.skip_bleu:
        results["bleu"] = cell(models, a.data, 4, a.large_batch, None, 1, a.threads, warmup_batches=1)
    json_path = a.json or os.path.splitext(a.out)[0] + ".json"
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1, default=str)

    s0 = results["cells"][0]["settings"]
    L = ["# SAN decoding speed (generated by results/archive/san/bench_san.py)", "",
         f"Command: `{command}`", "",
         f"Host: {s0.get('cpu_model')}, device {s0.get('device')}, {s0.get('torch_threads')} threads; "
         f"fairseq generator with incremental cache; lenpen 1.0, max length 1.2 x source + 10; "
         f"warm-up pass (3 batches) then "
         f"{a.repeats} timed passes interleaved across models; tok/s median (min-max); ratios "
         "are medians of per-round ratios against `vanilla` measured in the same run.", "",
         "## Free decoding", "",
         "| beam | batch | sentences | model | tok/s | sent/s | tok/s vs vanilla | sent/s vs vanilla | out tokens |",
         "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for c in results["cells"]:
        L += fmt_cell(c, names)
    if results["forced"]:
        L += ["", "## Forced to the reference lengths (same number of decoder steps for every model)", "",
              "| beam | batch | sentences | model | tok/s | sent/s | tok/s vs vanilla | sent/s vs vanilla | out tokens |",
              "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
        for c in results["forced"]:
            L += fmt_cell(c, names)
    if "bleu" in results:
        L += ["", "## Quality (full test set, beam 4, batch %d)" % a.large_batch, "",
              "| model | params | BLEU | chrF | tok/s | vs vanilla |", "|---|---:|---:|---:|---:|---:|"]
        for r in results["bleu"]["rows"]:
            L.append(f"| {r['model']} | {r['params']:,} | {r['bleu']:.2f} | {r['chrf']:.2f} | "
                     f"{r['tokens_per_s_median']:.1f} | x{r['speed_vs_baseline']:.2f} |")
    L += ["", "## Key/value cache per token (fp32, measured from fairseq's incremental state)", "",
          "| model | decoder | self-attn cache bytes / target token / hypothesis | enc-dec cache bytes / source token / sentence |",
          "|---|---|---:|---:|"]
    for n, c in results["cache"].items():
        L.append(f"| {n} | {c['decoder']} | {c['self_bytes_per_target_token']:.0f} | "
                 f"{c['cross_bytes_per_source_token']:.0f} |")
    with open(a.out, "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
