#!/usr/bin/env python
"""Contention-robust decoding timing of SAN vs vanilla, by the process's CPU time
(``time.process_time``) with one torch thread, and by wall time, over short interleaved rounds.

Why: on a shared 2-core machine other jobs make wall-clock passes vary by 10x (see
results/archive/san/san_speed.md); one thread's CPU time counts only this process's work.

    python results/archive/san/bench_san_cpu.py --data work/bible/bin --models vanilla=A.pt,san=B.pt \\
        [--sentences 16] [--large-batch 16] [--rounds 5] [--forced-len 30] --out OUT.json
    python results/archive/san/bench_san_cpu.py --render OUT.json     # its Markdown table again

The grid: free decoding (max length 1.2 x source + 10) and, with ``--forced-len L``, every
output exactly L tokens + EOS; beam 1 and 4; batch 1 and ``--large-batch``. Writes OUT.json
after every cell and OUT.md (the table) at the end. The first model is the baseline.

Decoding goes through :func:`fairseq_shared.timing.benchmark`, once per cell, with the cell
as fairseq-generate flags (``--beam B --batch-size N --cpu --num-workers 0``, plus
``--max-len-a 1.2 --max-len-b 10`` for free decoding, ``force=L`` for forced lengths),
``subset=--sentences``, ``threads=1``, one warm-up pass of one batch per model and
``repeats=--rounds`` timed passes interleaved across models (order rotated each round), as the
old loop did. CPU numbers are :class:`PassResult`'s ``cpu_seconds``; ratios are the
median per-round ratios that ``benchmark`` computes. Differences from the script's own loop
before it used ``fairseq_shared.timing`` (the committed results/san_speed_cpu*.json and
san_bible_cpu.json were measured with that loop):

* batches are fairseq's (``task.get_batch_iterator`` over the sentences sorted by length), not
  consecutive ids; with batch 1 or batch = ``--sentences`` the batches are the same sets;
* the warm-up batch is the first batch in that order (was: the first ids);
* the clocks wrap each ``task.inference_step`` (summed), not the whole loop over batches;
  ``wall_tok_s``/``wall_ratio`` come from that wall time (``gen_seconds``);
* batches are collated in this process (``--num-workers 0``, as the old loop did; outside the
  timers): fairseq-generate's default of one DataLoader worker forks a process every pass,
  which costs seconds of wall time per pass and competes with the decode on 2 cores;
* the model is loaded and the generator built as fairseq-generate does
  (``--model-overrides``, ``prepare_for_inference_`` with the generation options);
* every pass must decode every selected sentence exactly once (``DroppedSentencesError``),
  and the process's CPU time also counts timing's 5 ms memory-sampling thread (a fraction of
  a percent, alike for every model).
"""

import argparse
import json
import os
import statistics
import sys

FREE_LENGTH = ["--max-len-a", "1.2", "--max-len-b", "10"]


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


def run_cell(checkpoints, data, beam, bsz, forced, sentences, rounds):
    """One cell of the grid through fairseq_shared.timing -> the JSON cell."""
    from fairseq_shared.timing import benchmark

    gen_args = ["--beam", str(beam), "--batch-size", str(bsz), "--cpu", "--num-workers", "0"]
    if not forced:
        gen_args += FREE_LENGTH
    report = benchmark(
        checkpoints, data, gen_args, baseline=next(iter(checkpoints)), warmup=1,
        warmup_batches=1, repeats=rounds, subset=sentences, force=forced or None, threads=1,
        progress=lambda msg: print(msg, flush=True) if msg.startswith("[decode] pass") else None,
    )
    cell = {"beam": beam, "batch": bsz, "forced_len": forced,
            "sentences": report.settings["sentences_decoded"], "rounds": rounds,
            "generate_args": report.settings["generate_args"], "models": {}}
    for res in report.models:
        first = res.passes[0]
        cell["models"][res.name] = {
            "tokens": first.tokens, "sentences": first.sentences,
            "cpu_tok_s": [p.cpu_tokens_per_s for p in res.passes],
            "wall_tok_s": [p.tokens_per_s for p in res.passes],
            "cpu_sent_s": [p.cpu_sentences_per_s for p in res.passes],
            "cpu_ratio": res.cpu_speed_ratio,
            "wall_ratio": res.speed_ratio,
            "cpu_sent_ratio": res.cpu_sent_speed_ratio,
            "cpu_seconds": [p.cpu_seconds for p in res.passes],
            "gen_seconds": [p.gen_seconds for p in res.passes],
            "deterministic": res.deterministic,
            "bleu": res.bleu,
        }
    return cell, report.settings


def main(argv=None):
    prog = sys.argv[0] if argv is None else "results/archive/san/bench_san_cpu.py"
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 2 and argv[0] == "--render":
        with open(argv[1]) as f:
            print(markdown(json.load(f)), end="")
        return
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--data", required=True, help="a corpus root or a fairseq bin dir")
    p.add_argument("--models", required=True, help="name=ckpt,... ; the first is the baseline")
    p.add_argument("--sentences", type=int, default=16)
    p.add_argument("--large-batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--forced-len", type=int, default=30)
    p.add_argument("--forced-only", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    command = "python " + " ".join([prog, *argv])
    checkpoints = dict(item.split("=", 1) for item in a.models.split(","))
    cells = []
    settings = None
    for forced in ((a.forced_len,) if a.forced_only else (None, a.forced_len)):
        for beam in (1, 4):
            for bsz in (1, a.large_batch):
                cell, cell_settings = run_cell(checkpoints, a.data, beam, bsz, forced,
                                               a.sentences, a.rounds)
                settings = settings or {k: cell_settings.get(k) for k in (
                    "device", "cpu_model", "cpu_count", "torch_threads", "OMP_NUM_THREADS",
                    "torch", "fairseq", "host", "python", "timer", "cpu_timer", "subset",
                    "gen_subset")}
                for name, c in cell["models"].items():
                    print(f"beam {beam} batch {bsz} forced {forced} {name}: cpu tok/s median "
                          f"{statistics.median(c['cpu_tok_s']):.1f} ({min(c['cpu_tok_s']):.1f}-"
                          f"{max(c['cpu_tok_s']):.1f}) ratio x{c['cpu_ratio']:.2f}; wall ratio "
                          f"x{c['wall_ratio']:.2f}; tokens {c['tokens']}", flush=True)
                cells.append(cell)
                with open(a.out, "w") as f:
                    json.dump({"command": command, "settings": settings, "cells": cells}, f,
                              indent=1)
    with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
        f.write(markdown({"command": command, "cells": cells}))


if __name__ == "__main__":
    main()
