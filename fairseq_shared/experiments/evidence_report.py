"""Tables and learning curves of the evidence runs, rebuilt from the committed run files only.

Reads ``RESULTS/runs/*.json`` (written by :mod:`fairseq_shared.experiments.evidence`), the
hypotheses in ``RESULTS/hyps/``, and the corpus audit copied to ``RESULTS/corpus/``
(references, lookup baseline); writes ``RESULTS/tables.md``, ``RESULTS/summary.csv`` and
``RESULTS/learning_curves.png``.
"""

import csv
import json
import statistics
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_shared.experiments.statistics import (compare_bleu, cost_per_update, fmt_difference,
                                                   fmt_paired, fmt_seeds, load_runs, lookup_lines,
                                                   paired_by_seed, plot_curves, pooled_sd,
                                                   read_lines)

# table -> row configurations in order; "lookup" is the audit's no-model baseline
TABLES = {
    "takase": ("Takase & Kiyono: N layers over M parameter sets (equal updates)",
               ["lookup", "vanilla", "vanilla_2L", "sequence_2L", "cycle_2L", "cycle_rev_2L",
                "universal"]),
    "albert": ("ALBERT-style sub-layer sharing (all layers of a stack, equal updates)",
               ["lookup", "vanilla", "attn_shared", "ffn_shared", "universal"]),
    "xiao": ("Xiao et al.: attention-weight sharing in a 2L-layer decoder (equal updates)",
             ["lookup", "vanilla_dec2L", "san_dec2L"]),
}
BASELINES = {"takase": "vanilla", "albert": "vanilla", "xiao": "vanilla_dec2L"}


def row_stats(name: str, runs: List[Dict], base: Optional[List[Dict]], results: str,
              refs: List[str]) -> Dict:
    bleu = [r["test"]["bleu"] for r in runs]
    row = {
        "name": name, "label": runs[0]["label"], "N": runs[0]["N"],
        "decoder_N": runs[0].get("decoder_N", runs[0]["N"]), "M": runs[0]["M"],
        "scope": runs[0]["scope"], "params": runs[0]["params"], "seeds": [r["seed"] for r in runs],
        "updates": sorted({r["updates"] for r in runs}),
        "bleu": bleu, "chrf": [r["test"]["chrf"] for r in runs],
        "valid_loss": [r["valid_loss"] for r in runs if r["valid_loss"] is not None],
        "seconds_per_update": [cost_per_update(r) for r in runs],
        "paired": [],
    }
    if base and name != base[0]["name"]:
        row["paired"] = paired_by_seed(base, runs, results, refs)
    return row


def render_table(key: str, runs: Dict[str, List[Dict]], audit: Dict, results: str,
                 refs: List[str]) -> (str, List[Dict]):
    title, names = TABLES[key]
    base = runs.get(BASELINES[key])
    lines = [f"## {title}", "",
             "| method | layers enc+dec | sets M | params | seeds | updates | s/update (x vanilla) "
             "| valid loss | test BLEU (mean ± sd [95% over seeds], per seed) | test chrF "
             "| vs baseline [95%: seeds and test sampling] | single models of one seed against "
             "the baseline's (test sampling only: ΔBLEU, bootstrap p) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|---|"]
    pooled = pooled_sd([[r["test"]["bleu"] for r in rs] for rs in runs.values()])
    rows = []
    base_spu = statistics.mean(cost_per_update(r) for r in base) if base else None
    for name in names:
        if name == "lookup":
            lines += lookup_lines(audit["splits"]["test"]["lookup"], 12, 8)
            continue
        if name not in runs:
            lines.append(f"| {name} | not run yet | | | | | | | | | | |")
            continue
        row = row_stats(name, runs[name], base, results, refs)
        rows.append(row)
        spu = statistics.mean(row["seconds_per_update"])
        rel = f" (x{spu / base_spu:.2f})" if base_spu else ""
        paired = fmt_paired(row["paired"]) or "-"
        vl = fmt_seeds(row["valid_loss"], ".3f") if row["valid_loss"] else "-"
        versus = (fmt_difference(compare_bleu(base, runs[name], pooled, results, refs))
                  if base and name != base[0]["name"] else "-")
        lines.append(
            f"| {row['label']} | {row['N']}+{row['decoder_N']} | {row['M']} | "
            f"{row['params']:,} | {len(row['seeds'])} | {'/'.join(map(str, row['updates']))} | "
            f"{spu:.2f}{rel} | {vl} | {fmt_seeds(row['bleu'])} | {fmt_seeds(row['chrf'])} | "
            f"{versus} | {paired} |")
    return "\n".join(lines) + "\n", rows


def render(results: str, command: str = "") -> Dict[str, str]:
    out = Path(results)
    runs = load_runs(results)
    audit = json.loads((out / "corpus" / "audit.json").read_text(encoding="utf-8"))
    refs = read_lines(out / "corpus" / "test.ref")
    parts, all_rows = [], {}
    for key in TABLES:
        text, rows = render_table(key, runs, audit, results, refs)
        parts.append(text)
        all_rows.update({r["name"]: r for r in rows})
    any_run = next((rs[0] for rs in runs.values()), None)
    header = ["# Evidence runs on the clean Bible split", ""]
    if command:
        header += [f"Produced by `{command}` (one worker per core); tables regenerated from `runs/*.json` by "
                   "`python -m fairseq_shared.cli.evidence render`.", ""]
    if any_run:
        b = any_run["budget"]
        header += [
            f"Budget `{b['name']}`: d={b['dim']}, FFN {b['ffn']}, {b['heads']} heads, L={b['L']}, "
            f"lr {b['lr']} (inverse sqrt, warm-up {b['warmup_updates']}), max tokens "
            f"{b['max_tokens']}, dropout {b['dropout']}, {b['threads']} training thread per run. "
            f"Test = John ({audit['splits']['test']['pairs']} verses), valid = Acts; test "
            f"near-duplicates in train (chrF >= 70): "
            f"{100 * audit['splits']['test']['near_duplicate_share']['70']:.1f}%. "
            f"Decoding: beam {b['beam']}, lenpen {b['lenpen']}, detokenized sacreBLEU/chrF "
            f"(`{any_run['test']['bleu_signature']}`). Paired bootstrap: sacreBLEU, 1000 "
            "samples, against the table's baseline with the same seed.",
            "s/update is the CPU seconds of the training process per update (one thread; "
            "`training_cpu_seconds` in the run files), which other jobs on the machine do not "
            "inflate as they do wall time; runs that predate this record use wall seconds per "
            "update measured while two runs and other work shared the 2-core machine.", ""]
    text = "\n".join(header) + "\n" + "\n".join(parts)
    (out / "tables.md").write_text(text, encoding="utf-8")
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["config", "seed", "params", "updates", "training_seconds",
                    "training_cpu_seconds", "valid_loss", "bleu", "chrf"])
        for name, rs in sorted(runs.items()):
            for r in rs:
                w.writerow([name, r["seed"], r["params"], r["updates"],
                            round(r["training_seconds"], 1), r.get("training_cpu_seconds"),
                            r["valid_loss"], r["test"]["bleu"],
                            r["test"]["chrf"]])
    paths = {"tables": str(out / "tables.md"), "csv": str(out / "summary.csv")}
    plot = plot_curves(runs, out / "learning_curves.png", "valid_loss",
                       "valid loss (label-smoothed CE, base 2)",
                       "Learning curves on the clean Bible split (valid = Acts)",
                       wall="training minutes (wall, 1 thread, shared 2-core machine)")
    if plot:
        paths["plot"] = plot
    return paths
