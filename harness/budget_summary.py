"""The table the README leads with (``summary.md``): one row per budget configuration, joining
what the budget measured of its final models with what the frontier measured of the same final
models."""

import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from harness import beam1, frontier_report
from harness.statistics import (fmt_difference, fmt_seeds, markdown_row,
                                                   markdown_table)

# Row order and what each configuration is, for a reader of the README (the names are the
# plots' legends and the budget's own). Kasai et al.'s shallow decoder sits next to SAN: both
# are what a user would pick for decoding speed.
ROWS = {
    "vanilla": "vanilla",
    "cycle_rev_2L": "cycle_rev, 6 layers over 3 sets (Takase & Kiyono)",
    "vanilla_2L_narrow": "vanilla, 6 layers narrowed to cycle_rev's size (d = 96)",
    "cycle_rev_2L_depthcond": "cycle_rev, each depth its own norms and biases",
    "cycle_rev_2L_lora8": "cycle_rev, each depth a rank-8 LoRA delta (deploys unshared)",
    "vanilla_2L": "vanilla, twice as deep",
    "attn_shared": "attention shared by all layers (ALBERT)",
    "nodec_ffn": "no decoder FFN",
    "one_wide_ffn": "One Wide FFN (Pires et al.)",
    "vanilla_dec2L": "vanilla, decoder twice as deep",
    "san_dec2L": "SAN, the paper's policy (Xiao et al.)",
    "vanilla_2L_dec1": "deep encoder, shallow decoder (Kasai et al.)",
}


def valid_losses(runs: List[Dict]) -> List[float]:
    """The averaged final models' valid losses of a configuration's runs (those measured)."""
    return [r["average_valid_loss"] for r in runs if r.get("average_valid_loss") is not None]


def versus_cell(diffs: Dict, key: str, spec: str = "+.2f") -> str:
    """A configuration's differences to vanilla 3+3 and to its own unshared pair."""
    cells = [fmt_difference(diffs[key], spec)] if diffs.get(key) else []
    pair = diffs.get("pair")
    if pair and pair.get(key):
        cells.append(f"against {pair['label']}: {fmt_difference(pair[key], spec)}")
    return "; ".join(cells) or "-"


def speed_cells(frontier: List[Dict], later: Dict[str, List[Dict]],
                baseline: str = "vanilla") -> Tuple[Dict[str, Dict], List[str]]:
    """``({configuration: its frontier cells}, notes)``. ``frontier``'s cells stand for its own
    models, all timed in one boot. ``later`` (``{run folder: records}``,
    :func:`frontier_report.later_runs`), each run timed beside the baseline with the same
    settings, fills the configurations ``frontier`` lacks. A later cell is bridged through the
    baseline engine by engine: its speed over the baseline's in the same engine and run, times
    the baseline's own ratio in ``frontier`` (:func:`bridged`), since the engines' speeds
    relative to each other move between machines (vanilla 3+3's int8 at batch 1 reads 7.91x its
    eager fairseq in frontier/ and 12.15x in a later run on another CPU). A configuration timed
    in several later runs gets the mean of its runs' ratios, and a note gives each run's, since a
    run on a shared machine moves a ratio by up to about a fifth."""
    for rec in (rec for run in later.values() for rec in run if frontier):
        if rec["settings"] != frontier[0]["settings"]:
            raise SystemExit(f"{rec['model']}: a later frontier run's settings differ from "
                             f"frontier/'s ({rec['settings']} against "
                             f"{frontier[0]['settings']}); its ratios would not stand beside them")
    cells = (frontier_report.configuration_cells(frontier, frontier_report.options(frontier),
                                                 baseline) if frontier else {})
    timed: Dict[str, List[Tuple[str, Dict]]] = {}
    for folder, run in ((f, r) for f, r in later.items() if r):
        run_cells = frontier_report.configuration_cells(run, frontier_report.options(run), baseline)
        for name, cell in run_cells.items():
            if name not in cells:
                if baseline in cells:
                    cell = bridged(cell, run_cells[baseline], cells[baseline])
                timed.setdefault(name, []).append((folder, cell))
    notes = []
    for name, got in timed.items():
        cell = dict(got[0][1], speed={}, ratios={})
        for bs in got[0][1]["ratios"]:
            none = [None] * len(frontier_report.SHORT_ENGINES)
            per_engine = zip(*(c["ratios"].get(bs, none) for _, c in got))
            cell["ratios"][bs] = [statistics.mean(xs) if None not in xs else None
                                  for xs in per_engine]
            cell["speed"][bs] = frontier_report.speed_cell(cell["ratios"][bs])
        cells[name] = cell
        if len(got) > 1 and name != baseline:
            notes.append(f"`{name}`'s speed cells are the means of {len(got)} later runs: "
                         + "; ".join(", ".join(f"b={bs} {v}" for bs, v in c["speed"].items())
                                     + f" (`{Path(folder).name}`)" for folder, c in got) + ".")
    return cells, notes


def bridged(cell: Dict, run_baseline: Dict, baseline: Dict) -> Dict:
    """``cell`` (a later run's) with each engine's ratio over its run's baseline in the same
    engine, times ``baseline``'s ratio for that engine (the reference run's): the later run's
    own machine then moves no engine's cell; an engine either run lacks is not measured."""
    ratios = {}
    for bs, got in cell["ratios"].items():
        none = [None] * len(got)
        pairs = zip(got, run_baseline["ratios"].get(bs, none), baseline["ratios"].get(bs, none))
        ratios[bs] = [x / theirs * ours if x and theirs and ours else None
                      for x, theirs, ours in pairs]
    return dict(cell, ratios=ratios,
                speed={bs: frontier_report.speed_cell(r) for bs, r in ratios.items()})


def summary_table(finals: Dict[str, Dict[int, Dict]], versus: Dict[str, Dict],
                  cpu_per_update: Optional[Dict[str, float]], frontier: List[Dict],
                  lookup_bleu: Optional[float], baseline: str = "vanilla",
                  later: Optional[Dict[str, List[Dict]]] = None,
                  beam1_runs: Optional[Dict[str, List[Dict]]] = None,
                  beam1_not_kept: Sequence[str] = (),
                  rate_notes: Sequence[str] = (), scaled: Sequence[str] = ()) -> List[str]:
    """``finals``: {configuration: {seed: final record}}; ``versus``:
    :func:`budget_findings.comparisons`; ``cpu_per_update``: {configuration: CPU s/update} or
    None; ``frontier``: :func:`frontier_report.load_records`, possibly none yet; ``later``:
    the records of later frontier runs (:func:`speed_cells`), whose notes follow the table;
    ``beam1_runs``: :func:`beam1.load`'s, the beam-1 column where there is any, and
    ``beam1_not_kept``: :func:`beam1.not_kept`'s; ``scaled``: the configurations whose training
    CPU a later rate run gave (marked ‡), and ``rate_notes`` what it was
    (:func:`budget_rates.scaled_note`)."""
    cells, notes = speed_cells(frontier, later or {}, baseline)
    beam1_cells, beam1_notes = beam1.cells(beam1_runs or {}, baseline, beam1_not_kept)
    sizes, speeds = [None], ["decoding speed"]
    if frontier:
        sizes = [str(b) for b in frontier[0]["settings"]["batch_sizes"]]
        speeds = frontier_report.speed_headers(frontier, baseline)
    head = ["model", "layers", "parameters", "seeds",
            "test BLEU, final: mean ± sd [95% over seeds] (per seed)",
            f"ΔBLEU vs {baseline} 3+3 [95%: seeds and test sampling]",
            "valid loss, final (bits)", f"Δ valid loss vs {baseline} 3+3 [95%: seeds]",
            "training CPU per update", "MB (fairseq / ct2_int8)", *speeds,
            *([beam1.HEADER] if beam1_runs else [])]
    lines = markdown_table(head, align="llrrrlrlr")
    if lookup_bleu is not None:
        lines.append("| lookup baseline (closest training verse) | - | - | - | "
                     f"{lookup_bleu:.2f} |" + " - |" * (len(head) - 5))
    base_rate = (cpu_per_update or {}).get(baseline)
    for name in (n for n in [*ROWS, *sorted(set(finals) - set(ROWS))] if n in finals):
        runs = [finals[name][s] for s in sorted(finals[name])]
        rate = (cpu_per_update or {}).get(name)
        own, diff = cells.get(name, {}), versus.get(name, {})
        losses = valid_losses(runs)
        row = [f"`{name}`: {ROWS.get(name, runs[0]['label'])}",
               f"{runs[0]['N']}+{runs[0]['decoder_N']}", f"{runs[0]['params']:,}",
               str(len(runs)), fmt_seeds([r["test"]["bleu"] for r in runs]),
               versus_cell(diff, "bleu"),
               fmt_seeds(losses, ".3f") if losses else "not measured",
               versus_cell(diff, "valid_loss", "+.3f"),
               (f"{rate / base_rate:.2f}" + (" ‡" if name in scaled else "")
                if rate and base_rate else "-"),
               own.get("mb", "not measured"), *[own.get("speed", {}).get(bs, "-") for bs in sizes],
               *([beam1_cells.get(name, "-")] if beam1_runs else [])]
        lines.append(markdown_row(row))
    return lines + [line for note in [*notes, *beam1_notes, *rate_notes] for line in ("", note)]
