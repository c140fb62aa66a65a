"""The deployment protocol of the fastest published CPU students (issue 55, item 3): every final
model decoded at beam 1, batch 32, one thread, in its fastest exporting engine.

Each run is a frontier run (``python -m harness.frontier ... --beam 1 --batch-sizes 32
--threads 1``) into ``beam1/RUN/``, with vanilla 3+3 timed in the same machine boot
(:func:`frontier_report.later_runs` refuses a run without it), since a model's ratio divides by
its own run's vanilla. Rendered from the records alone: the summary's beam-1 column."""

import statistics
from pathlib import Path
from typing import Dict, List, Tuple

from harness import frontier_report
from harness.frontier_report import configuration

FOLDER = "beam1"
SETTINGS = {"beam": 1, "batch_sizes": [32], "threads": 1}
#: the published figure as issue 55 quotes it: another CPU and language pair, so a reference
#: beside the column, never a ratio
PUBLISHED = ("The published reference, Marian's tiny11 student under the same protocol (beam 1, "
             "batch 32, int8, one thread), decodes about 3,300 target tokens/s per thread on an "
             "Intel Xeon at 17 MB: another CPU and another language pair, so a reference, not "
             "a ratio")
HEADER = "beam 1, b=32, 1 thread: BLEU / tok/s per thread (fastest engine) / xvanilla 3+3"


def fastest(records: List[Dict]) -> Dict[str, Dict]:
    """``{model: its fastest engine's row}`` by CPU tokens/s at the run's one batch size
    (:func:`frontier_report.options` rows: BLEU at that batch size, ``cpu_tokens_per_s``)."""
    out: Dict[str, Dict] = {}
    for row in frontier_report.options(records):
        (size, cell), = row["batch"].items()
        speed = cell.get("cpu_tokens_per_s")
        if speed and speed > out.get(row["model"], {}).get("speed", 0):
            out[row["model"]] = {"engine": row["engine"], "bleu": row["bleu"], "speed": speed}
    return out


def check_settings(folder: str, records: List[Dict]) -> None:
    for rec in records:
        got = {k: rec["settings"][k] for k in SETTINGS}
        if got != SETTINGS:
            raise SystemExit(f"{folder}/models/{rec['model']}.json: a beam-1 run is {SETTINGS}; "
                             f"this record has {got}")


def model_rows(runs: Dict[str, List[Dict]], anchor: str = "vanilla") -> Dict[str, List[Dict]]:
    """``{model: one row per run that timed it}``: its fastest engine, BLEU, tok/s and ratio over
    the run's anchor, the mean speed of the anchor configuration's seeds' fastest engines in
    that run (a model timed in two runs, as the anchor is, has a row from each)."""
    out: Dict[str, List[Dict]] = {}
    for folder, records in runs.items():
        check_settings(folder, records)
        best = fastest(records)
        base = statistics.mean(r["speed"] for m, r in best.items() if configuration(m) == anchor)
        for model, r in best.items():
            out.setdefault(model, []).append({**r, "ratio": r["speed"] / base,
                                              "run": Path(folder).name})
    return out


def cells(runs: Dict[str, List[Dict]], anchor: str = "vanilla") -> Tuple[Dict[str, str], List[str]]:
    """``({configuration: its column cell}, notes)``: a model's runs averaged, then the
    configuration's seeds (each ratio over its own run's anchor); the engine named is the
    fastest, every one where runs or seeds differ."""
    groups: Dict[str, List[List[Dict]]] = {}
    for model, timings in sorted(model_rows(runs, anchor).items()):
        groups.setdefault(configuration(model), []).append(timings)
    out = {}
    for name, seeds in groups.items():
        engines = ", ".join(dict.fromkeys(r["engine"] for timings in seeds for r in timings))
        mean = lambda key: statistics.mean(  # noqa: E731  (over seeds, of each seed's runs)
            statistics.mean(r[key] for r in timings) for timings in seeds)
        counted = f" ({len(seeds)} seeds)" if len(seeds) > 1 else ""
        out[name] = (f"{mean('bleu'):.2f} / {mean('speed'):,.0f} ({engines}) / "
                     f"{mean('ratio'):.2f}{counted}")
    notes = [f"The beam-1 column: `{FOLDER}/RUN/models/*.json`, each run with vanilla 3+3 timed "
             f"in it ({', '.join(f'`{Path(f).name}`' for f in runs)}); per model its fastest "
             "engine by CPU tokens/s, and the BLEU of that engine's output at beam 1; \"-\": "
             f"not timed at beam 1. {PUBLISHED}."] if runs else []
    return out, notes


def load(results: str, anchor: str = "vanilla") -> Dict[str, List[Dict]]:
    return frontier_report.later_runs(str(Path(results) / FOLDER), anchor)
