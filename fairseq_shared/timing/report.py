"""A timing report on disk: ``results.md`` (the Markdown table), ``results.csv``,
``results.json`` and ``hyp.<model>.txt``."""

import csv
import json
import os
from typing import Dict, List

from fairseq_shared.experiments.markdown import fmt
from fairseq_shared.timing.results import BenchmarkReport


def markdown_table(report: BenchmarkReport) -> str:
    s = report.settings
    lines = [
        f"Decoding `{s['gen_subset']}` ({s['subset']}), beam {s['beam']}, lenpen {s['lenpen']}, "
        f"batch size {s['batch_size']}, max tokens {s['max_tokens']}, device {s['device']} "
        f"({s['cpu_model']}), {s['torch_threads']} threads, fp16 {s['fp16']}, "
        f"forced lengths: {s['force_lengths']}; {s['warmup_passes']} warm-up + "
        f"{s['timed_passes']} timed passes, interleaved; speed = median over passes "
        f"(CPU: the process's CPU time in the same calls), "
        f"ratios = median per-round ratio vs `{report.baseline}`.",
        "",
        "| model | params | BLEU | chrF | sentences | out tokens | tok/s (median) | tok/s min-max | "
        "sent/s | ms/token | speed vs baseline | peak mem MB | "
        "CPU tok/s (median, min-max) | CPU speed vs baseline |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.rows():
        lines.append(
            f"| {r['model']} | {r['params']:,} | {fmt(r['bleu'], '.2f')} | {fmt(r['chrf'], '.2f')} "
            f"| {r['sentences']} | {r['output_tokens']} | {fmt(r['tokens_per_s_median'], '.1f')} "
            f"| {fmt(r['tokens_per_s_min'], '.1f')}-{fmt(r['tokens_per_s_max'], '.1f')} "
            f"| {fmt(r['sentences_per_s_median'], '.2f')} | {fmt(r['ms_per_token'], '.2f')} "
            f"| x{fmt(r['speed_vs_baseline'], '.2f')} | {fmt(r['peak_mem_mb'], '.0f')} "
            f"| {fmt(r['cpu_tokens_per_s_median'], '.1f')} "
            f"({fmt(r['cpu_tokens_per_s_min'], '.1f')}-{fmt(r['cpu_tokens_per_s_max'], '.1f')}) "
            f"| x{fmt(r['cpu_speed_vs_baseline'], '.2f')} |"
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
]


def output_names(names, prefix: str = "results") -> List[str]:
    """The files :func:`write_report` writes for the models ``names``."""
    return [f"{prefix}.{k}" for k in ("md", "csv", "json")] + [f"hyp.{n}.txt" for n in names]


def write_report(report: BenchmarkReport, out_dir: str, prefix: str = "results") -> Dict[str, str]:
    """Write ``<prefix>.md``, ``<prefix>.csv``, ``<prefix>.json`` and ``hyp.<name>.txt``."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f"{prefix}.{k}") for k in ("md", "csv", "json")}
    with open(paths["md"], "w", encoding="utf-8") as f:
        f.write(markdown_table(report))
    with open(paths["csv"], "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS + ["settings"])
        w.writeheader()
        for r in report.rows():
            w.writerow({**{k: r[k] for k in CSV_FIELDS}, "settings": json.dumps(report.settings)})
    with open(paths["json"] + ".tmp", "w", encoding="utf-8") as f:
        json.dump(report.to_json(), f, indent=2, default=str)
    os.replace(paths["json"] + ".tmp", paths["json"])
    for m in report.models:
        with open(os.path.join(out_dir, f"hyp.{m.name}.txt"), "w", encoding="utf-8") as f:
            f.write("".join(h + "\n" for h in m.hypotheses))
    return paths
