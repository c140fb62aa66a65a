"""The LM runs' table and learning curves, rebuilt from the committed files only:
``RESULTS/runs/*.json`` (:mod:`fairseq_shared.experiments.lm_evidence`),
``RESULTS/baselines.json`` (:mod:`fairseq_shared.experiments.lm_baselines`) and
``RESULTS/corpus.json``; writes ``RESULTS/tables.md`` and ``RESULTS/learning_curves.png``."""

import statistics
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_shared.experiments.lm_evidence import LM_CONFIGS
from fairseq_shared.experiments.queue import read_json
from fairseq_shared.experiments.statistics import cost_per_update as cost
from fairseq_shared.experiments.statistics import fmt_seeds, load_runs, plot_curves

BASELINE = "vanilla_L6"  # the per-seed comparison: same depth, same compute
COMMAND = "python -m fairseq_shared.cli.lm_evidence run --data work/bible_lm --commit"


def baseline_lines(baselines: Optional[Dict]) -> List[str]:
    if not baselines:
        return ["| n-gram baselines | not computed yet | | | | | | | | |"]
    lines = []
    for name, m in baselines["models"].items():
        lines.append(f"| {m['label']} | - | - | - | {sum(m['ngrams']):,} n-grams | "
                     f"- | - | - | {m['valid']['perplexity']:.2f} | "
                     f"{m['test']['perplexity']:.2f} | - |")
    return lines


def render_table(runs: Dict[str, List[Dict]], baselines: Optional[Dict]) -> str:
    lines = ["| model | layers N | sets M | shared | params | seeds | updates | "
             "CPU s/update (x vanilla 6) | valid ppl (mean ± sd, per seed) | "
             "test ppl (mean ± sd, per seed) | test ppl vs vanilla 6 layers, same seed |",
             "|---|---:|---:|---|---:|---:|---:|---:|---|---|---|"]
    lines += baseline_lines(baselines)
    base = {r["seed"]: r for r in runs.get(BASELINE, [])}
    base_cost = statistics.mean(cost(r) for r in base.values()) if base else None
    for name, cfg in LM_CONFIGS.items():
        rs = runs.get(name)
        if not rs:
            lines.append(f"| {cfg['label']} | {cfg['N']} | {cfg['M']} | "
                         f"{cfg.get('scope', '-') if 'strategy' in cfg else '-'} | "
                         "not run yet | | | | | | |")
            continue
        r0 = rs[0]
        c = statistics.mean(cost(r) for r in rs)
        rel = f" (x{c / base_cost:.2f})" if base_cost else ""
        test = [r["test"]["perplexity"] for r in rs]
        valid = [r["valid_ppl"] for r in rs if r.get("valid_ppl")]
        vs = "; ".join(f"s{r['seed']}: {r['test']['perplexity'] - base[r['seed']]['test']['perplexity']:+.2f}"
                       for r in rs if r["seed"] in base and name != BASELINE) or "-"
        shared = f"{r0['strategy']}/{r0['scope']}" if r0["strategy"] != "none" else "-"
        lines.append(
            f"| {r0['label']} | {r0['N']} | {r0['M']} | {shared} | {r0['params']:,} | "
            f"{len(rs)} | {'/'.join(str(u) for u in sorted({r['updates'] for r in rs}))} | "
            f"{c:.3f}{rel} | {fmt_seeds(valid) if valid else '-'} | {fmt_seeds(test)} | "
            f"{vs} |")
    return "\n".join(lines) + "\n"


def header(corpus: Optional[Dict], baselines: Optional[Dict], runs: Dict) -> List[str]:
    out = ["# Decoder-only language models on the English Bible (WEB)", "",
           f"Produced by `{COMMAND}` (one worker per core); regenerated from `runs/*.json`, "
           "`baselines.json` and `corpus.json` by `python -m fairseq_shared.cli.lm_evidence "
           "render`.", ""]
    if corpus and "fairseq_splits" in corpus:
        s = corpus["fairseq_splits"]
        held = corpus.get("held_out_books", {})
        out += [f"Corpus: train {s['train']['verses']:,} verses / {s['train']['tokens']:,} "
                f"tokens; valid ({', '.join(held.get('valid', ['Acts']))}) "
                f"{s['valid']['verses']:,} / {s['valid']['tokens']:,}; test "
                f"({', '.join(held.get('test', ['John']))}) {s['test']['verses']:,} / "
                f"{s['test']['tokens']:,} (sentencepiece pieces of the translation corpus, "
                "plus one `</s>` per verse).", ""]
    if baselines:
        out += [f"Perplexity: {baselines['definition']}.", ""]
    any_run = next((rs[0] for rs in runs.values()), None)
    if any_run:
        b = any_run["budget"]
        out += [f"Budget `{b['name']}`: pre-LN, d={b['dim']}, FFN {b['ffn']}, {b['heads']} "
                f"heads, tied input/output embeddings, {b['max_tokens']} tokens per batch, one "
                f"verse per sample, Adam lr {b['lr']} (inverse sqrt, warm-up "
                f"{b['warmup_updates']}), dropout {b['dropout']}, {b['threads']} thread per "
                "run; every row trained for the same number of updates. CPU s/update: CPU "
                "seconds of the training process per update (other jobs do not inflate it).",
                ""]
    return out


def render(results: str) -> Dict[str, str]:
    out = Path(results)
    runs = load_runs(results) if (out / "runs").exists() else {}
    baselines = read_json(out / "baselines.json")
    corpus = read_json(out / "corpus.json")
    text = "\n".join(header(corpus, baselines, runs)) + "\n" + render_table(runs, baselines)
    (out / "tables.md").write_text(text, encoding="utf-8")
    paths = {"tables": str(out / "tables.md")}
    kn5 = ((baselines or {}).get("models") or {}).get("kn5")
    plot = plot_curves(runs, out / "learning_curves.png", "valid_ppl", "valid perplexity (Acts)",
                       "Decoder-only LMs on the English Bible: valid perplexity",
                       order=LM_CONFIGS, log=True,
                       hline=(kn5["valid"]["perplexity"], "5-gram KN") if kn5 else None)
    if plot:
        paths["plot"] = plot
    return paths
