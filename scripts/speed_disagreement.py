"""Why two speed tables disagree about the same pair of models (issue 19, item 4).

    python scripts/speed_disagreement.py VANILLA.pt CYCLE_REV.pt --data work/bible \\
        --out results/speed_disagreement.md [--sentences 200] [--repeats 3]

``results/main_job.md`` (batch 64, output limit 1.2 x source + 10) and ``results/archive/export/export.md``
(batch 1 and 32, fairseq-generate's default limit 0 x source + 200) timed the same two
checkpoints and read the second x1.31 and x0.27 the speed of the first. This decodes the pair
under each table's settings and under settings that change one thing at a time, with the
decode trace (``fairseq_shared.timing.trace``), so each cause shows as its own number:

* ``steps`` and ``tail`` (steps a batch ran after its longest output ended: beams still
  searching for ``beam`` finished hypotheses) and ``at limit`` (outputs that hit the length
  limit): a model that searches longer does more work for the same output tokens;
* ``CPU ms/step``: the cost of one decoder step, the architecture's share;
* CPU against wall time: the machine's load;
* ``forced``: every output forced to its reference, so both models do the same steps and the
  ratio is the architecture alone.

Ratios are the median (min-max) of the per-round ratios of interleaved passes, one thread.
"""

import argparse
import sys

SETTINGS = (  # name, batch size, max_len_a, max_len_b, force
    ("main_job (b=64, 1.2x+10)", 64, 1.2, 10, None),
    ("export b=1 (0x+200)", 1, 0.0, 200, None),
    ("export b=32 (0x+200)", 32, 0.0, 200, None),
    ("b=32, 1.2x+10", 32, 1.2, 10, None),
    ("b=1, 1.2x+10", 1, 1.2, 10, None),
    ("forced to the reference, b=32", 32, 0.0, 200, "reference"),
)


def measure(args, progress=print):
    from fairseq_shared.timing import benchmark

    rows = []
    ckpts = dict(zip(args.names, args.checkpoints))
    settings = SETTINGS[: args.settings] if args.settings else SETTINGS
    for name, bs, a, b, force in settings:
        report = benchmark(
            ckpts, args.data, ["--beam", str(args.beam), "--lenpen", "1.0", "--batch-size",
                               str(bs), "--max-len-a", str(a), "--max-len-b", str(b), "--cpu"],
            warmup=1, repeats=args.repeats, subset=args.sentences or None, force=force,
            threads=1, progress=progress)
        for r in report.rows():
            rows.append({"setting": name, **{k: r[k] for k in (
                "model", "bleu", "sentences", "output_tokens", "decoder_steps", "tail_steps",
                "hit_max_len", "occupancy", "steps_per_sentence", "cpu_seconds_median",
                "gen_seconds_median", "cpu_tokens_per_s_median", "tokens_per_s_median",
                "cpu_ms_per_step", "cpu_us_per_sentence_step", "cpu_speed_vs_baseline",
                "cpu_speed_vs_baseline_min", "cpu_speed_vs_baseline_max", "speed_vs_baseline",
                "speed_vs_baseline_min", "speed_vs_baseline_max", "threads")}})
    return rows


def markdown(rows, command):
    from fairseq_shared.markdown import fmt

    lines = ["# The speed disagreement, separated", "", f"Command: `{command}`", "",
             "| setting | model | BLEU | out tokens | decoder steps | tail steps | at limit | "
             "occupancy | CPU s | wall s | CPU tok/s | CPU ms/step | CPU ratio (min-max) | "
             "wall ratio (min-max) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['setting']} | {r['model']} | {fmt(r['bleu'], '.2f')} | {r['output_tokens']} | "
            f"{fmt(r['decoder_steps'], 'd')} | {fmt(r['tail_steps'], 'd')} | "
            f"{fmt(r['hit_max_len'], 'd')} | {fmt(r['occupancy'], '.2f')} | "
            f"{fmt(r['cpu_seconds_median'], '.2f')} | {fmt(r['gen_seconds_median'], '.2f')} | "
            f"{fmt(r['cpu_tokens_per_s_median'], '.1f')} | {fmt(r['cpu_ms_per_step'], '.2f')} | "
            f"x{fmt(r['cpu_speed_vs_baseline'], '.2f')} ({fmt(r['cpu_speed_vs_baseline_min'], '.2f')}"
            f"-{fmt(r['cpu_speed_vs_baseline_max'], '.2f')}) | x{fmt(r['speed_vs_baseline'], '.2f')} "
            f"({fmt(r['speed_vs_baseline_min'], '.2f')}-{fmt(r['speed_vs_baseline_max'], '.2f')}) |")
    lines += ["", "tail steps: steps a batch ran after its longest output ended; at limit: "
              "outputs that reached max_len_a x source + max_len_b; CPU ms/step: the process's "
              "CPU time per decoder step (encoder and search included), one thread.", ""]
    return "\n".join(lines)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs=2, help="the baseline, then the other model")
    p.add_argument("--names", nargs=2, default=["baseline", "other"],
                   help="their names (default: baseline other)")
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True, help="markdown file (JSON beside it)")
    p.add_argument("--sentences", type=int, default=200, help="evenly spaced; 0: all")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--settings", type=int, default=0,
                   help="only the first N settings of the list (0: all)")
    return p.parse_args(argv)


def main(argv=None):
    import shlex

    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    rows = measure(args, progress=lambda m: print(m, file=sys.stderr, flush=True))
    command = "python scripts/speed_disagreement.py " + " ".join(shlex.quote(a) for a in argv)
    from fairseq_shared.markdown import write_report

    text = markdown(rows, command)
    write_report(args.out, text, {"command": command, "rows": rows})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
