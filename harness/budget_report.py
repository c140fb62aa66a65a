"""Tables and plots of the budget curves, rebuilt from the committed files only: the
milestones, runs, hypotheses and corpus snapshot of :mod:`~harness.budget_curve`
and the 16,000-update runs of ``RESULTS/long/`` (:mod:`~harness.budget_long`)
make ``RESULTS/tables.md``, ``RESULTS/budget_curves.png`` and ``RESULTS/summary.md``
(:mod:`~harness.budget_summary`), and the frontier of the same final models
(``RESULTS/frontier/``) is rendered again; what each holds: results/README.md. Every row's
label, depths, comparison pair, training data, validation interval and thread count come from
its records (:func:`harness.configs.row_fields`, written by the worker), never from today's
catalogue, so editing ``configs.py`` for a new study leaves these tables as they are (a test
keeps it). A suite without
milestones (budget ``evidence``, ``results/bible_clean``) gets the papers' equal-updates tables
instead (:func:`render_equal_updates`).

The runs' own CPU totals come from several machines and loads, so training cost is compared
with ``RESULTS/train_rate.json`` where it exists: every configuration's steady CPU seconds per
update, measured on one machine in one run (``python -m harness.budget rates``,
formerly ``scripts/thread_rate.py``; later configurations from a later run scaled by vanilla
3+3, :mod:`~harness.budget_rates`). The CPU-hours axis is then updates times that rate.
"""

import csv
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_shared.data.pipeline import read_lines
from harness import beam1, budget_answers, frontier_report
from harness.budget_curve import NAMES
from harness.budget_findings import (BASELINE, averaging_lines, best_lines, best_sets,
                                     comparisons, crossover_lines, describe, long_bleu_lines,
                                     method_note, row_names, row_record, valid_curve)
from harness.budget_long import LONG, LONG_AT, long_lines, with_long_seeds
from harness.budget_rates import RATE_FILE, rate_table, scaled, scaled_note, training_rates
from harness.budget_summary import summary_table, valid_losses, versus_cell
from harness.configs import BASELINES
from harness.queue import read_record
from harness.statistics import (compare_bleu, cost_per_update, fmt_difference,
                                                   fmt_paired, fmt_seeds, load_runs, lookup_lines,
                                                   markdown_row, markdown_table, paired_by_seed,
                                                   pending_line, plot_curves, pooled_sd,
                                                   save_panels, score_cells)

#: the frontier of the models trained after frontier/'s run: timed in a later run (another
#: machine boot) beside the anchor's seeds, with frontier/'s settings (README.md there says how)
LATER_FRONTIER = "frontier_later"
COMMAND = "python -m harness.budget run --data work/bible --commit"
EQUAL_UPDATES_COMMAND = ("python -m harness.budget run --data work/bible --budget "
                         "evidence --results results/bible_clean --work work/evidence --commit")
#: the equal-updates tables -> (title, rows in order); "lookup" is the audit's no-model baseline
EQUAL_UPDATE_TABLES = {
    "takase": ("Takase & Kiyono: N layers over M parameter sets (equal updates)",
               ["lookup", "vanilla", "vanilla_2L", "sequence_2L", "cycle_2L", "cycle_rev_2L",
                "universal"]),
    "albert": ("ALBERT-style sub-layer sharing (all layers of a stack, equal updates)",
               ["lookup", "vanilla", "attn_shared", "ffn_shared", "universal"]),
    "xiao": ("Xiao et al.: attention-weight sharing in a 2L-layer decoder (equal updates)",
             ["lookup", "vanilla_dec2L", "san_dec2L"]),
}


def load(results: str):
    """({name: {seed: {update: milestone record}}}, {name: {seed: final record}}); a record
    that is not whole JSON stops the render with one line naming it."""
    stages = defaultdict(lambda: defaultdict(dict))
    for path in sorted((Path(results) / "milestones").glob("*.json")):
        r = read_record(path)
        stages[r["name"]][r["seed"]][r["update"]] = r
    finals = {n: {r["seed"]: r for r in rs} for n, rs in load_runs(results).items()}
    return stages, defaultdict(dict, finals)


def metric_table(metric: str, stages, finals, updates: List[int], lookup: Optional[Dict],
                 paired: Dict[str, str], versus: Dict) -> List[str]:
    title = "BLEU" if metric == "bleu" else "chrF"
    head = ["configuration", "layers enc+dec", "params", "seeds",
            *[f"{k:,} updates" for k in updates], "final: average of last checkpoints",
            "updates trained"]
    if metric == "bleu":
        head += ["final vs vanilla 3+3 (and vs its unshared pair) [95%: seeds and test sampling]",
                 "single models of one seed against vanilla 3+3's (test sampling only: ΔBLEU, "
                 "bootstrap p)"]
    lines = [f"## Test {title} (mean ± sd [95% interval over seeds] (per seed))", "",
             *markdown_table(head)]
    if lookup:
        lk = f"{lookup[metric]:.2f}"
        row = ["lookup baseline (no model: closest training verse)", "-", "-", "-",
               *[lk] * len(updates), lk, "-"] + (["-", "-"] if metric == "bleu" else [])
        lines.append(markdown_row(row))
    for name in row_names(stages, finals):
        seeds = sorted(set(stages.get(name, {})) | set(finals.get(name, {})))
        some = next(iter(stages[name][seeds[0]].values()), None) or finals[name][seeds[0]]
        final = [finals[name][s] for s in seeds if s in finals.get(name, {})]
        label, layers = describe(row_record(name, stages, finals))
        row = [label, layers, f"{some['params']:,}", str(len(seeds))]
        row += [fmt_seeds([stages[name][s][k]["test"][metric] for s in seeds
                           if k in stages[name][s]]) for k in updates]
        row.append(fmt_seeds([f["test"][metric] for f in final]))
        row.append("/".join(str(f["updates"]) + (" (stop)" if f.get("stopped_at") else "")
                            for f in final) or "-")
        if metric == "bleu":
            row += [versus_cell(versus.get(name, {}), "bleu"), paired.get(name, "-")]
        lines.append(markdown_row(row))
    return lines + [""]


def valid_table(stages, finals, updates: List[int], versus: Dict) -> List[str]:
    """Valid loss (bits, as fairseq logs it) at each milestone's checkpoint and of the final
    averaged model, with the final's differences to vanilla 3+3 counting seeds."""
    head = ["configuration", "layers enc+dec", "seeds", *[f"{k:,} updates" for k in updates],
            "final: average of last checkpoints", "final vs vanilla 3+3 [95%: seeds]"]
    lines = ["## Valid loss in bits (mean ± sd [95% interval over seeds] (per seed))", "",
             "The milestones' losses are the checkpoints' as training logged them; the final "
             "column is the averaged model's, measured with fairseq-validate "
             "(`harness/valid_loss.py`). The valid set is fixed, so the interval counts seeds "
             "only. A distilled student's valid loss is not compared with a model trained on the "
             "corpus itself (other targets; summary.md says why).", "", *markdown_table(head)]
    for name in row_names(stages, finals):
        seeds = sorted(set(stages.get(name, {})) | set(finals.get(name, {})))
        final = [finals[name][s] for s in seeds if s in finals.get(name, {})]
        label, layers = describe(row_record(name, stages, finals))
        row = [label, layers, str(len(seeds))]
        row += [fmt_seeds([stages[name][s][k]["valid_loss"] for s in seeds
                       if k in stages[name].get(s, {})], ".3f") for k in updates]
        row += [fmt_seeds(valid_losses(final), ".3f"),
                versus_cell(versus.get(name, {}), "valid_loss", "+.3f")]
        lines.append(markdown_row(row))
    return lines + [""]


def paired_final(finals, results: str, refs: List[str]) -> Dict[str, str]:
    """The bootstrap cell of each final model: against vanilla 3+3 with the same seed, and
    against its own unshared pair (``pair`` in its records) where it has one."""
    out = {}
    for name, by_seed in finals.items():
        if name == BASELINE:
            continue
        runs = list(by_seed.values())
        cells = [fmt_paired(paired_by_seed(list(finals.get(BASELINE, {}).values()), runs,
                                           results, refs))]
        pair = row_record(name, {}, finals)["pair"]
        if pair in finals:
            label, layers = describe(row_record(pair, {}, finals))
            versus = fmt_paired(paired_by_seed(list(finals[pair].values()), runs, results, refs))
            cells.append(f"against {label} {layers}: {versus or 'no common seed'}")
        out[name] = "; ".join(c for c in cells if c) or "-"
    return out


def cpu_hours(name: str, by_seed: Dict[int, Dict[int, Dict]], updates: List[int],
              cpu_per_update: Optional[Dict[str, float]]) -> Optional[List[float]]:
    """Training CPU-hours at each of ``updates``: updates times the configuration's rate on
    one machine, None where it has none; without rates (None), the mean over seeds of each
    milestone's own measured training CPU."""
    if cpu_per_update is None:
        return [statistics.mean((by_seed[s][k].get("train_cpu_seconds") or 0) / 3600
                                for s in by_seed) for k in updates]
    rate = cpu_per_update.get(name)
    return [k * rate / 3600 for k in updates] if rate else None


def plot(stages, out: Path, lookup_bleu: Optional[float] = None,
         cpu_per_update: Optional[Dict[str, float]] = None) -> Optional[str]:
    from fairseq_shared.plotting import pyplot

    if not stages:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    axes[1].sharey(axes[0])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, name in enumerate(n for n in NAMES if n in stages):
        by_seed = stages[name]
        updates = sorted(set.intersection(*(set(m) for m in by_seed.values())))
        if not updates:
            continue
        bleu = [[by_seed[s][k]["test"]["bleu"] for s in by_seed] for k in updates]
        hours = cpu_hours(name, by_seed, updates, cpu_per_update)
        color = colors[i % len(colors)]
        seeds = f"{len(by_seed)} seed" + ("s" if len(by_seed) > 1 else "")
        label = f"{name} {describe(row_record(name, stages, {}))[1]} ({seeds})"
        for ax, xs in ((axes[0], updates), (axes[1], hours)):
            if xs is not None:
                _band(ax, xs, bleu, color, marker="o", label=label)
        xs, losses = valid_curve(by_seed)
        if xs:
            _band(axes[2], xs, losses, color, linewidth=1.2)
    if lookup_bleu is not None:
        for ax in axes[:2]:
            ax.axhline(lookup_bleu, color="grey", linestyle="--", linewidth=1,
                       label=f"lookup baseline ({lookup_bleu:.2f})")
    axes[0].set_xlabel("updates")
    axes[1].set_xlabel("training CPU-hours (process CPU time, all threads)" if cpu_per_update is None
                       else "training CPU-hours: updates x CPU s/update measured on one machine")
    axes[0].set_ylabel("test BLEU (sacreBLEU, detokenized)")
    axes[2].set_xlabel("updates")
    axes[2].set_ylabel("valid loss (bits), every 100 updates")
    axes[2].set_xscale("log")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="upper left",
               bbox_to_anchor=(0.0, -0.02), ncol=4)
    return save_panels(fig, axes, "Budget curves on the clean Bible split (band: min-max over "
                       "seeds)", out / "budget_curves.png", legend=False)


def _band(ax, xs, values: List[List[float]], color, **line) -> None:
    """The mean over seeds of each point's ``values``, and their min-max band (2+ seeds)."""
    ax.plot(xs, [statistics.mean(v) for v in values], color=color, **line)
    if len(values[0]) > 1:
        ax.fill_between(xs, [min(v) for v in values], [max(v) for v in values], color=color,
                        alpha=0.2)


def load_with_long(results: str):
    """(stages, finals, long stages): :func:`load`'s, with the seeds trained only in ``long/``
    joined in up to :data:`LONG_AT` (their milestones and their final model there)."""
    stages, finals = load(results)
    long_stages, _ = load(str(Path(results) / LONG))
    finals = with_long_seeds(finals, long_stages, LONG_AT)
    for name, by_seed in long_stages.items():  # new seeds' milestones up to LONG_AT
        for seed, ms in by_seed.items():
            if seed not in stages.get(name, {}):
                stages[name][seed] = {k: m for k, m in ms.items() if k <= LONG_AT}
    return stages, finals, long_stages


def render(results: str, command: Optional[str] = None) -> Dict[str, str]:
    """The suite's tables and plots; the budget curves' where ``RESULTS/milestones/`` exists,
    else the equal-updates tables (:func:`render_equal_updates`)."""
    out = Path(results)
    if not (out / "corpus" / "audit.json").exists():
        raise SystemExit(f"--results {results}: no corpus/audit.json there; a worker copies it "
                         "on starting (python -m harness.budget run --data ...)")
    audit = read_record(out / "corpus" / "audit.json")
    refs = read_lines(out / "corpus" / "test.ref")
    if not (out / "milestones").is_dir():
        return render_equal_updates(results, audit, refs, command or EQUAL_UPDATES_COMMAND)
    command = command or COMMAND
    stages, finals, long_stages = load_with_long(results)
    lookup = audit["splits"]["test"].get("lookup")
    updates = sorted({k for by_seed in stages.values() for m in by_seed.values() for k in m})
    records = [m for by_seed in stages.values() for ms in by_seed.values() for m in ms.values()]
    records += [f for by_seed in finals.values() for f in by_seed.values()]
    paired = paired_final(finals, results, refs)
    lines = ["# Budget curves on the clean Bible split", "",
             f"Produced by `{command}` (one worker at two threads, the plan in README.md); regenerated from `milestones/*.json`"
             " and `runs/*.json` by `python -m harness.budget render`. Each milestone "
             "is the test set decoded from the checkpoint at that update; the final column "
             "averages the last interval checkpoints of the run (`average_of` in its file). "
             "Training CPU time is the process's CPU time over all its threads; a run "
             "with other work beside it reads high (README.md, Progress, says which).", ""]
    versus, pooled = comparisons(finals, results, refs)
    lines += [method_note(pooled), ""]
    lines += metric_table("bleu", stages, finals, updates, lookup, paired, versus)
    lines += valid_table(stages, finals, updates, versus)
    lines += metric_table("chrf", stages, finals, updates, lookup, {}, {})
    signatures = sorted({(r["test"]["bleu_signature"], r["test"]["chrf_signature"])
                         for r in records})
    rates = training_rates(results, finals)
    cpu_per_update = ({n: r["steady_cpu_s_per_update"] for n, r in rates["rows"].items()}
                      if rates else None)
    frontier = frontier_report.load_records(str(out / "frontier"))
    int8_mb = frontier_report.disk_mb(frontier_report.by_configuration(
        frontier_report.options(frontier)))
    lines += crossover_lines(stages, rates, pooled.of("valid_loss", BASELINE),
                             int8_mb=int8_mb)
    lines += averaging_lines(stages, finals)
    lines += long_lines(long_stages, load(results)[0], results)
    lines += crossover_lines(long_stages, rates, pooled.of("valid_loss", BASELINE),
                             int8_mb=int8_mb,
                             title="Crossover of valid loss to 16,000 updates, `long/` only")
    lines += long_bleu_lines(long_stages, results, refs)
    if rates:
        lines += rate_table(rates, {n: describe(row_record(n, stages, finals))[1]
                                    for n in row_names(stages, finals)})
    lines += ["Signatures: " + "; ".join(f"`{b}`, `{c}`" for b, c in signatures), ""]
    (out / "tables.md").write_text("\n".join(lines), encoding="utf-8")
    paths = {"tables": str(out / "tables.md"), "summary": str(out / "summary.md")}
    later = frontier_report.later_runs(str(out / LATER_FRONTIER))
    best = best_sets(finals, results, refs)
    for folder, records in [(str(out / "frontier"), frontier), *later.items()]:
        if records:  # one command regenerates every table and plot of the suite
            paths.update({f"{Path(folder).relative_to(out)} {k}": v for k, v in
                          frontier_report.render(folder, best_set=best["bleu"]["set"]).items()})
    beam1_runs = beam1.load(results)
    summary = ["# Quality, training cost, size and decoding speed of the final models", "",
               "Rendered by `python -m harness.budget render` from `runs/*.json` "
               "(test BLEU and valid loss of the final averaged models), "
               f"`{RATE_FILE}` (training CPU per update, every configuration in one run on one "
               "machine, over vanilla 3+3's) and `frontier/models/*.json` (the same final "
               "models decoding the whole test set: beam 4, one thread, CPU tokens/s over "
               "vanilla 3+3's eager fairseq at each batch size, in one machine boot; per-step "
               "cost, wall clock and every model's row in `frontier/frontier.md`)"
               + (f"; the models trained since, from `{LATER_FRONTIER}/RUN/models/*.json`, "
                  "each run timed beside vanilla 3+3's two seeds with the same settings; their "
                  "cells are bridged engine by engine (a model's speed over vanilla 3+3's in the "
                  "same engine and run, times vanilla 3+3's ratio in `frontier/`), since the "
                  "engines' relative speeds move between machines "
                  f"(`{LATER_FRONTIER}/RUN/frontier.md` has each run's own ratios)"
                  if later else "") + ".", "",
               method_note(pooled), "", *best_lines(best), "",
               *budget_answers.section(finals, versus, stages, rates, pooled, frontier, later,
                                      beam1_runs),
               *summary_table(finals, versus, cpu_per_update, frontier,
                              lookup["bleu"] if lookup else None, later=later,
                              beam1_runs=beam1_runs,
                              beam1_not_kept=beam1.not_kept(results),
                              rate_notes=scaled_note(rates, finals),
                              scaled=scaled(rates, finals)), ""]
    (out / "summary.md").write_text("\n".join(summary), encoding="utf-8")
    figure = plot(stages, out, lookup["bleu"] if lookup else None, cpu_per_update)
    if figure:
        paths["plot"] = figure
    return paths


def equal_updates_table(key: str, runs: Dict[str, List[Dict]], lookup: Dict, results: str,
                        refs: List[str]) -> str:
    """One of :data:`EQUAL_UPDATE_TABLES`: each row against the table's baseline."""
    title, names = EQUAL_UPDATE_TABLES[key]
    base = runs.get(BASELINES[key])
    lines = [f"## {title}", "", *markdown_table(
        ["method", "layers enc+dec", "sets M", "params", "seeds", "updates",
         "s/update (x vanilla)", "valid loss", "test BLEU (mean ± sd [95% over seeds], per seed)",
         "test chrF", "vs baseline [95%: seeds and test sampling]", "single models of one seed "
         "against the baseline's (test sampling only: ΔBLEU, bootstrap p)"], align="llrrrrrr")]
    pooled = pooled_sd([[r["test"]["bleu"] for r in rs] for rs in runs.values()])
    base_spu = statistics.mean(cost_per_update(r) for r in base) if base else None
    for name in names:
        if name == "lookup":
            lines += lookup_lines(lookup, 12, 8)
            continue
        if name not in runs:
            lines.append(pending_line(name, 12))
            continue
        rs, first = runs[name], runs[name][0]
        compared = base and name != base[0]["name"]
        spu = statistics.mean(cost_per_update(r) for r in rs)
        rel = f" (x{spu / base_spu:.2f})" if base_spu else ""
        versus = fmt_difference(compare_bleu(base, rs, pooled, results, refs)) if compared else "-"
        paired = (fmt_paired(paired_by_seed(base, rs, results, refs)) if compared else "") or "-"
        lines.append(markdown_row([
            first["label"], f"{first['N']}+{first.get('decoder_N', first['N'])}", str(first["M"]),
            f"{first['params']:,}", str(len(rs)),
            "/".join(map(str, sorted({r["updates"] for r in rs}))), f"{spu:.2f}{rel}",
            *score_cells(rs), versus, paired]))
    return "\n".join(lines) + "\n"


def render_equal_updates(results: str, audit: Dict, refs: List[str],
                         command: str) -> Dict[str, str]:
    """``RESULTS/tables.md`` (:data:`EQUAL_UPDATE_TABLES`), ``summary.csv`` and
    ``learning_curves.png`` of a suite whose runs all train to the same update (no milestones)."""
    out = Path(results)
    runs = load_runs(results)
    test = audit["splits"]["test"]
    parts = [equal_updates_table(key, runs, test["lookup"], results, refs)
             for key in EQUAL_UPDATE_TABLES]
    header = ["# Evidence runs on the clean Bible split", "",
              f"Produced by `{command}` (one worker per core); tables regenerated from "
              "`runs/*.json` by `python -m harness.budget render --results "
              "results/bible_clean`.", ""]
    any_run = next((rs[0] for rs in runs.values()), None)
    if any_run:
        b = any_run["budget"]
        header += [
            f"Budget `{b['name']}`: d={b['dim']}, FFN {b['ffn']}, {b['heads']} heads, L={b['L']}, "
            f"lr {b['lr']} (inverse sqrt, warm-up {b['warmup_updates']}), max tokens "
            f"{b['max_tokens']}, dropout {b['dropout']}, {b['threads']} training thread per run. "
            f"Test = John ({test['pairs']} verses), valid = Acts; test near-duplicates in train "
            f"(chrF >= 70): {100 * test['near_duplicate_share']['70']:.1f}%. "
            f"Decoding: beam {b['beam']}, lenpen {b['lenpen']}, detokenized sacreBLEU/chrF "
            f"(`{any_run['test']['bleu_signature']}`). Paired bootstrap: sacreBLEU, 1000 "
            "samples, against the table's baseline with the same seed.",
            "s/update is the CPU seconds of the training process per update (one thread; "
            "`training_cpu_seconds` in the run files), which other jobs on the machine do not "
            "inflate as they do wall time; runs that predate this record use wall seconds per "
            "update measured while two runs and other work shared the 2-core machine.", ""]
    (out / "tables.md").write_text("\n".join(header) + "\n" + "\n".join(parts), encoding="utf-8")
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["config", "seed", "params", "updates", "training_seconds",
                    "training_cpu_seconds", "valid_loss", "bleu", "chrf"])
        for name, rs in sorted(runs.items()):
            w.writerows([name, r["seed"], r["params"], r["updates"],
                         round(r["training_seconds"], 1), r.get("training_cpu_seconds"),
                         r["valid_loss"], r["test"]["bleu"], r["test"]["chrf"]] for r in rs)
    paths = {"tables": str(out / "tables.md"), "csv": str(out / "summary.csv")}
    figure = plot_curves(runs, out / "learning_curves.png", "valid_loss",
                         "valid loss (label-smoothed CE, base 2)",
                         "Learning curves on the clean Bible split (valid = Acts)",
                         wall="training minutes (wall, 1 thread, shared 2-core machine)")
    if figure:
        paths["plot"] = figure
    return paths
