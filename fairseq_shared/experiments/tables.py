"""Result rows of a reproduction and the papers' Markdown tables (Takase & Kiyono, the
ALBERT-style ablation, Xiao et al., all configurations), written with the JSON / CSV results
and the plots."""

import csv
import json
import os
from typing import Dict, List, Optional

from fairseq_shared.markdown import fmt
from fairseq_shared.experiments.plots import plot
from fairseq_shared.experiments.runs import Run

def collect_rows(runs: List[Run], decode: Optional[Dict]) -> List[Dict]:
    dec = {r["model"]: r for r in (decode or {}).get("results", [])}
    rows = []
    base_wps = None
    infos = {r.name: (r.done_info() or {}) for r in runs}
    if infos.get("vanilla", {}).get("train_wps"):
        base_wps = infos["vanilla"]["train_wps"]
    for r in runs:
        info, d = infos[r.name], dec.get(r.name, {})
        rows.append({
            "name": r.name, "label": r.config.get("label", r.name), "tables": r.config.get("tables", []),
            "arch": r.arch, "strategy": r.strategy, "scope": r.scope, "M": r.M, "N": r.N,
            "params": r.params, "skip_reason": r.skip_reason,
            "updates": info.get("updates"), "train_wps": info.get("train_wps"),
            "train_speed_vs_vanilla": (info["train_wps"] / base_wps)
            if base_wps and info.get("train_wps") else None,
            "valid_loss": info.get("valid_loss"),
            "bleu": d.get("bleu"), "chrf": d.get("chrf"),
            "decode_tokens_per_s": d.get("tokens_per_s_median"),
            "decode_sentences_per_s": d.get("sentences_per_s_median"),
            "decode_speed_vs_vanilla": d.get("speed_vs_baseline"),
            "decode_sent_speed_vs_vanilla": d.get("sent_speed_vs_baseline"),
            "decode_tokens_per_s_min": d.get("tokens_per_s_min"),
            "decode_tokens_per_s_max": d.get("tokens_per_s_max"),
            "ms_per_token": d.get("ms_per_token"),
            "output_tokens": d.get("output_tokens"), "sentences": d.get("sentences"),
            # CPU time (one thread: hardly moved by other jobs) and what beam search did
            "decode_cpu_tokens_per_s": d.get("cpu_tokens_per_s_median"),
            "decode_cpu_speed_vs_vanilla": d.get("cpu_speed_vs_baseline"),
            "decode_cpu_speed_min": d.get("cpu_speed_vs_baseline_min"),
            "decode_cpu_speed_max": d.get("cpu_speed_vs_baseline_max"),
            "decode_steps": d.get("decoder_steps"), "decode_hit_max": d.get("hit_max_len"),
            "decode_cpu_ms_per_step": d.get("cpu_ms_per_step"),
        })
    return rows


def lookup_lines(lookup: Optional[Dict], columns: int, bleu_at: int) -> List[str]:
    """A table row for the lookup baseline: BLEU and chrF in columns ``bleu_at`` and the next."""
    if not lookup:
        return []
    cells = ["-"] * columns
    cells[0] = "lookup baseline (no model: closest training verse)"
    cells[bleu_at], cells[bleu_at + 1] = f"{lookup['bleu']:.2f}", f"{lookup['chrf']:.2f}"
    return ["| " + " | ".join(cells) + " |"]


def render_tables(rows: List[Dict], budget: Dict, decode: Optional[Dict],
                  lookup: Optional[Dict] = None) -> str:
    s = (decode or {}).get("settings", {})
    out = [f"# Reproduced tables (budget `{budget['name']}`)", "",
           f"Budget: {', '.join(f'{k}={v}' for k, v in budget.items() if k != 'name')}.",
           f"Every configuration has width d={budget['dim']} (FFN {budget['ffn']}, "
           f"{budget['heads']} heads), the same updates, batch and optimizer; L={budget['L']}.",
           ""]
    if s:
        out.append(f"Decoding: `{s.get('gen_subset')}` ({s.get('subset')}), beam {s.get('beam')}, "
                   f"lenpen {s.get('lenpen')}, batch {s.get('batch_size')}, device "
                   f"{s.get('device')}, {s.get('torch_threads')} threads; "
                   f"{s.get('warmup_passes')} warm-up + {s.get('timed_passes')} timed passes, "
                   f"interleaved. BLEU: `{decode.get('bleu_signature')}`; chrF: "
                   f"`{decode.get('chrf_signature')}`. References: {s.get('references')}.")
        out.append("")
    if lookup:
        n_near = len(lookup["near_duplicate_positions"])
        out += [f"Lookup baseline (no model; the English of the training verse whose Spanish is "
                f"closest, `python -m fairseq_shared.cli.audit`) on the same "
                f"{lookup['sentences']} sentences: BLEU {lookup['bleu']:.2f}, chrF "
                f"{lookup['chrf']:.2f}. Test near-duplicates of training data (chrF >= 70): "
                f"{100 * lookup['near_duplicate_share_70']:.1f}%"
                + (f"; {n_near} of the decoded sentences, so the all-configurations table "
                   "also gives BLEU without them." if n_near else "."), ""]

    def skipped(r):
        return f" (skipped: {r['skip_reason']})" if r["skip_reason"] else ""

    # Takase & Kiyono
    out += ["## Parameter sharing across layers (Takase & Kiyono 2021)", "",
            "| method | M | N | params | train speed | updates | BLEU | chrF |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    out += lookup_lines(lookup, 8, 6)
    for r in rows:
        if "takase" in r["tables"]:
            out.append(f"| {r['label']}{skipped(r)} | {r['M']} | {r['N']} | "
                       f"{fmt(r['params'], ',')} | {fmt(r['train_speed_vs_vanilla'], '.2f', 'x')} | "
                       f"{fmt(r['updates'], 'd')} | {fmt(r['bleu'])} | {fmt(r['chrf'])} |")
    # ALBERT
    out += ["", "## What is shared (ALBERT-style ablation, for MT)", "",
            "| shared | grouping (sets per stack) | params | train speed | BLEU | chrF |",
            "|---|---|---:|---:|---:|---:|"]
    out += lookup_lines(lookup, 6, 4)
    albert_label = {"vanilla": "nothing", "universal": "all"}
    for r in rows:
        if "albert" in r["tables"]:
            label = albert_label.get(r["name"], r["label"])
            grouping = "none" if r["strategy"] == "none" else (
                f"all {r['N']} layers" if r["M"] == 1 or r["strategy"] == "universal"
                else f"{r['strategy']}, {r['M']} groups")
            out.append(f"| {label}{skipped(r)} | {grouping} | {fmt(r['params'], ',')} | "
                       f"{fmt(r['train_speed_vs_vanilla'], '.2f', 'x')} | {fmt(r['bleu'])} | "
                       f"{fmt(r['chrf'])} |")
    # Xiao
    out += ["", "## Attention-weight sharing in the decoder (Xiao et al. 2019)", "",
            "| method | N | params | BLEU | chrF | decode tok/s | decode sent/s | "
            "CPU speed vs baseline |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    out += lookup_lines(lookup, 8, 3)
    for r in rows:
        if "xiao" in r["tables"]:
            label = "Baseline" if r["name"] == "vanilla" else r["label"]
            out.append(f"| {label}{skipped(r)} | {r['N']} | {fmt(r['params'], ',')} | "
                       f"{fmt(r['bleu'])} | {fmt(r['chrf'])} | "
                       f"{fmt(r['decode_tokens_per_s'], '.1f')} | "
                       f"{fmt(r['decode_sentences_per_s'], '.2f')} | "
                       f"{fmt(r.get('decode_cpu_speed_vs_vanilla'), '.2f', 'x')} |")
    # everything
    out += ["", "## All configurations", "",
            "| config | arch | strategy | scope | M | N | params | updates | train tok/s | "
            "train speed | valid loss | BLEU | chrF | decode tok/s (min-max) | "
            "decode CPU speed |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(
            f"| {r['name']}{skipped(r)} | {r['arch']} | {r['strategy']} | {r['scope']} | {r['M']} | "
            f"{r['N']} | {fmt(r['params'], ',')} | {fmt(r['updates'], 'd')} | "
            f"{fmt(r['train_wps'], '.0f')} | {fmt(r['train_speed_vs_vanilla'], '.2f', 'x')} | "
            f"{fmt(r['valid_loss'], '.3f')} | {fmt(r['bleu'])} | {fmt(r['chrf'])} | "
            f"{fmt(r['decode_tokens_per_s'], '.1f')} ({fmt(r['decode_tokens_per_s_min'], '.1f')}-"
            f"{fmt(r['decode_tokens_per_s_max'], '.1f')}) | "
            f"{fmt(r.get('decode_cpu_speed_vs_vanilla'), '.2f', 'x')} |")
    if any("bleu_clean" in r for r in rows):
        out += ["", "BLEU / chrF without the test near-duplicates: " + ", ".join(
            f"{r['name']} {fmt(r.get('bleu_clean'))} / {fmt(r.get('chrf_clean'))}" for r in rows)]
    out += ["", "Training speed: median fairseq `wps` (target tokens/s) over the logged "
            "intervals, relative to vanilla. Decoding speed: median output tokens/s over the "
            "timed passes (fairseq's generator, wall time inside `task.inference_step`); "
            "speed ratios are the median per-round ratio of CPU-time tokens/s against "
            "vanilla (the wall-clock ratio moves with the machine's load).", ""]
    return "\n".join(out)


def write_results(rows, budget, decode, out, lookup=None) -> Dict[str, str]:
    os.makedirs(out, exist_ok=True)
    paths = {"tables": os.path.join(out, "tables.md"),
             "json": os.path.join(out, "results.json"),
             "csv": os.path.join(out, "results.csv")}
    with open(paths["tables"], "w", encoding="utf-8") as f:
        f.write(render_tables(rows, budget, decode, lookup))
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump({"budget": budget, "rows": rows, "lookup": lookup,
                   "decode_settings": (decode or {}).get("settings"),
                   "bleu_signature": (decode or {}).get("bleu_signature"),
                   "chrf_signature": (decode or {}).get("chrf_signature")},
                  f, indent=2, default=str)
    with open(paths["csv"], "w", newline="", encoding="utf-8") as f:
        fields = [k for k in rows[0] if k != "tables"] if rows else []
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    for p in plot(rows, out):
        paths[os.path.basename(p)] = p
    return paths


def main_job_table(result: Dict, budget: Dict) -> str:
    """The main job's one table (``make demo``): the two models side by side, what was
    decoded and how, the budget."""
    decode = result.get("decode") or {}
    s = decode.get("settings", {})
    lines = [
        "| model | layers (enc+dec) | parameter sets per stack | parameters | updates | BLEU | "
        "chrF | decoding CPU tokens/s | decoder steps (at length limit) | CPU ms/step | "
        "vs vanilla (CPU, min-max) | wall tokens/s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lookup = result.get("lookup")
    lines += lookup_lines(lookup, 12, 5)
    for r in result["rows"]:
        lines.append(
            f"| {r['name']} | {r['N']}+{r['N']} | {r['M']} | {fmt(r['params'], ',')} | "
            f"{fmt(r['updates'], 'd')} | {fmt(r['bleu'], '.2f')} | {fmt(r['chrf'], '.2f')} | "
            f"{fmt(r.get('decode_cpu_tokens_per_s'), '.1f')} | {fmt(r.get('decode_steps'), 'd')} "
            f"({fmt(r.get('decode_hit_max'), 'd')}) | {fmt(r.get('decode_cpu_ms_per_step'), '.2f')} "
            f"| x{fmt(r.get('decode_cpu_speed_vs_vanilla'), '.2f')} "
            f"({fmt(r.get('decode_cpu_speed_min'), '.2f')}-{fmt(r.get('decode_cpu_speed_max'), '.2f')}) "
            f"| {fmt(r['decode_tokens_per_s'], '.1f')} |")
    lines += [
        "",
        f"Decoded: `{s.get('gen_subset')}` set, {s.get('subset')}; beam {s.get('beam')}, lenpen "
        f"{s.get('lenpen')}, batch {s.get('batch_size')}, {s.get('device')} with "
        f"{s.get('torch_threads')} threads; max length {s.get('max_len_a')} x source + "
        f"{s.get('max_len_b')}; tokens/s = median of {s.get('timed_passes')} interleaved timed "
        f"passes after warm-up ({s.get('warmup_batches')} batches; fairseq's generator), per "
        f"second of the process's CPU time (wall clock in the last column); the ratio is the "
        f"median (min-max) of the per-round CPU ratios. Decoder steps: incremental decoder "
        f"calls of one pass (a batch runs until its last sentence has {s.get('beam')} finished "
        f"hypotheses), so a model that only stops earlier shows fewer steps, not a lower "
        f"CPU ms/step.",
        f"BLEU `{decode.get('bleu_signature')}`, chrF `{decode.get('chrf_signature')}`, "
        f"against {s.get('references')}.",
        "Lookup baseline: no model, the English of the training verse whose Spanish is "
        "closest (the corpus audit, `python -m fairseq_shared.cli.audit`), on the same "
        "verses; a model is worth what it scores above it." if lookup else
        "No lookup baseline: the corpus has no audit (`python -m fairseq_shared.cli.audit "
        "RAW_DIR`).",
        f"Budget `{budget['name']}`: d={budget['dim']}, FFN {budget['ffn']}, L={budget['L']}, "
        f"max {budget['max_update']} updates (cap {budget['max_minutes']} min per model), "
        f"max tokens {budget['max_tokens']}, {budget['threads']} training threads.",
        "",
    ]
    return "\n".join(lines)
