"""A timing report on disk: ``results.md`` (the Markdown table), ``results.csv``,
``results.json`` and ``hyp.<model>.txt``."""

import csv
import io
import json
import os
from typing import Dict, List

from fairseq_shared.checkpoint_io import write_text
from fairseq_shared.errors import printable, printable_data
from fairseq_shared.markdown import fmt
from fairseq_shared.timing.results import BenchmarkReport


def markdown_table(report: BenchmarkReport) -> str:
    s = report.settings
    lines = [
        f"Decoding `{s['gen_subset']}` ({s['subset']}), beam {s['beam']}, lenpen {s['lenpen']}, "
        f"batch size {s['batch_size']}, max tokens {s['max_tokens']}, device {s['device']} "
        f"({s['cpu_model']}), {s['torch_threads']} threads, fp16 {s['fp16']}, "
        f"forced lengths: {s['force_lengths']}; {s['warmup_passes']} warm-up + "
        f"{s['timed_passes']} timed passes, interleaved. Speed is read from the process's CPU "
        f"time in `task.inference_step` (median over passes, min-max); ratios = median (min-max) "
        f"of the per-round CPU tokens/s ratio vs `{report.baseline}`. Steps: incremental "
        f"decoder calls (a batch runs until its last sentence has {s['beam']} finished "
        f"hypotheses or hits the length limit); per-step cost = CPU time / steps, and / "
        f"sentence-steps (sentences alive summed over steps). Wall-clock columns last.",
        "",
        "| model | params | BLEU | chrF | sentences | out tokens | decoder steps | "
        "steps/sentence | occupancy | hit max len | CPU s (min-max) | CPU tok/s | "
        "CPU ms/step | CPU us/sentence-step | CPU speed vs baseline (min-max) | "
        "wall tok/s (min-max) | wall speed vs baseline (min-max) | peak mem MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.rows():
        lines.append(
            f"| {r['model']} | {r['params']:,} | {fmt(r['bleu'], '.2f')} | {fmt(r['chrf'], '.2f')} "
            f"| {r['sentences']} | {r['output_tokens']} | {fmt(r['decoder_steps'], 'd')} "
            f"| {fmt(r['steps_per_sentence'], '.1f')} | {fmt(r['occupancy'], '.2f')} "
            f"| {fmt(r['hit_max_len'], 'd')} "
            f"| {fmt(r['cpu_seconds_median'], '.2f')} ({fmt(r['cpu_seconds_min'], '.2f')}-"
            f"{fmt(r['cpu_seconds_max'], '.2f')}) | {fmt(r['cpu_tokens_per_s_median'], '.1f')} "
            f"| {fmt(r['cpu_ms_per_step'], '.2f')} | {fmt(r['cpu_us_per_sentence_step'], '.0f')} "
            f"| x{fmt(r['cpu_speed_vs_baseline'], '.2f')} ({fmt(r['cpu_speed_vs_baseline_min'], '.2f')}-"
            f"{fmt(r['cpu_speed_vs_baseline_max'], '.2f')}) "
            f"| {fmt(r['tokens_per_s_median'], '.1f')} ({fmt(r['tokens_per_s_min'], '.1f')}-"
            f"{fmt(r['tokens_per_s_max'], '.1f')}) "
            f"| x{fmt(r['speed_vs_baseline'], '.2f')} ({fmt(r['speed_vs_baseline_min'], '.2f')}-"
            f"{fmt(r['speed_vs_baseline_max'], '.2f')}) | {fmt(r['peak_mem_mb'], '.0f')} |"
        )
    sig = next((m.bleu_signature for m in report.models if m.bleu_signature), "")
    csig = next((m.chrf_signature for m in report.models if m.chrf_signature), "")
    lines += ["", f"BLEU signature: `{sig}`", f"chrF signature: `{csig}`",
              f"References: {s['references']}"]
    if s["force_lengths"] == "reference":
        lines.append("Outputs forced to the references: BLEU/chrF are 100 by construction.")
    return "\n".join(lines) + "\n"


CSV_FIELDS = [
    "model", "checkpoint", "params", "bleu", "chrf", "sentences", "output_tokens",
    "tokens_per_s_median", "tokens_per_s_min", "tokens_per_s_max", "tokens_per_s_rel_iqr",
    "sentences_per_s_median", "ms_per_token", "gen_seconds_median", "wall_seconds_median",
    "peak_mem_mb", "mem_growth_mb", "speed_vs_baseline", "sent_speed_vs_baseline",
    "timed_passes", "deterministic",
    "cpu_seconds_median", "cpu_tokens_per_s_median", "cpu_tokens_per_s_min",
    "cpu_tokens_per_s_max", "cpu_sentences_per_s_median", "cpu_sentences_per_s_min",
    "cpu_sentences_per_s_max", "cpu_ms_per_token", "cpu_speed_vs_baseline",
    "cpu_sent_speed_vs_baseline",
    "threads", "speed_vs_baseline_min", "speed_vs_baseline_max", "cpu_speed_vs_baseline_min",
    "cpu_speed_vs_baseline_max", "cpu_seconds_min", "cpu_seconds_max", "decoder_steps",
    "sentence_steps", "occupancy", "tail_steps", "hit_max_len", "max_steps_per_batch",
    "steps_per_sentence", "cpu_ms_per_step", "cpu_ms_per_step_min", "cpu_ms_per_step_max",
    "cpu_us_per_sentence_step", "decoder_cpu_share",
]


def output_names(names, prefix: str = "results", trace: bool = False) -> List[str]:
    """The files :func:`write_report` writes for the models ``names``."""
    return ([f"{prefix}.{k}" for k in ("md", "csv", "json")] + [f"hyp.{n}.txt" for n in names]
            + ([f"trace.{n}.json" for n in names] if trace else []))


def write_report(report: BenchmarkReport, out_dir: str, prefix: str = "results",
                 trace: bool = False) -> Dict[str, str]:
    """Write ``<prefix>.md``, ``<prefix>.csv``, ``<prefix>.json`` and ``hyp.<name>.txt``;
    with ``trace``, also ``trace.<name>.json``: the first timed pass's batches (sentences,
    length limit, rows per decoder step, output lengths)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f"{prefix}.{k}") for k in ("md", "csv", "json")}
    # a path that is not UTF-8: escaped, \xff
    write_text(paths["md"], printable(markdown_table(report)))
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=CSV_FIELDS + ["settings"])
    w.writeheader()
    for r in report.rows():
        w.writerow(printable_data({**{k: r[k] for k in CSV_FIELDS},
                                   "settings": json.dumps(report.settings)}))
    write_text(paths["csv"], table.getvalue())
    write_text(paths["json"], json.dumps(printable_data(report.to_json()), indent=2, default=str))
    for m in report.models:
        write_text(os.path.join(out_dir, f"hyp.{m.name}.txt"),
                   "".join(h + "\n" for h in m.hypotheses))
        if trace and m.batch_trace:
            paths[f"trace.{m.name}"] = os.path.join(out_dir, f"trace.{m.name}.json")
            write_text(paths[f"trace.{m.name}"],
                       json.dumps({"model": m.name, "batches": m.batch_trace}))
    return paths
