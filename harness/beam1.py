"""The deployment protocol of the fastest published CPU students (issue 55, item 3): every final
model decoded at beam 1, batch 32, one thread, in its fastest exporting engine.

Each run is a frontier run (``python -m harness.frontier ... --beam 1 --batch-sizes 32
--threads 1``) into ``beam1/RUN/``, with vanilla 3+3 timed in the same machine boot
(:func:`frontier_report.later_runs` refuses a run without it), since a model's ratio divides by
its own run's vanilla. Rendered from the records alone: the summary's beam-1 column."""

import json
import statistics
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from harness import frontier_report
from harness.frontier_report import configuration

FOLDER = "beam1"
NOT_KEPT = "NOT_KEPT.json"
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
        base = statistics.mean(_anchor(best, anchor))
        for model, r in best.items():
            out.setdefault(model, []).append({**r, "ratio": r["speed"] / base,
                                              "run": Path(folder).name})
    return out


def anchor_speeds(runs: Dict[str, List[Dict]], anchor: str = "vanilla") -> Dict[str, List[float]]:
    """``{run folder: the anchor configuration's seeds' fastest-engine speeds}``."""
    return {folder: _anchor(fastest(records), anchor) for folder, records in runs.items()}


def _anchor(best: Dict[str, Dict], anchor: str) -> List[float]:
    """The anchor configuration's speeds among :func:`fastest`'s rows."""
    return [r["speed"] for m, r in sorted(best.items()) if configuration(m) == anchor]


def summaries(runs: Dict[str, List[Dict]], anchor: str = "vanilla") -> Dict[str, Dict]:
    """``{configuration: {"bleu", "speed" (tok/s per thread), "ratio", "engines", "timed"}}``: a
    model's runs averaged, then the configuration's seeds; the ratio, the seeds a run timed over
    that run's anchor, then the runs (so the anchor's own is 1.00 whichever of its seeds a run
    timed); the engines named, fastest first seen; the seeds timed."""
    groups: Dict[str, List[Tuple[str, List[Dict]]]] = {}
    for model, timings in sorted(model_rows(runs, anchor).items()):
        groups.setdefault(configuration(model), []).append((model, timings))
    out = {}
    for name, seeds in groups.items():
        mean = lambda key: statistics.mean(  # noqa: E731  (over seeds, of each seed's runs)
            statistics.mean(r[key] for r in timings) for _, timings in seeds)
        by_run: Dict[str, List[float]] = {}  # a ratio is of one run: the seeds it timed, then runs
        for _, timings in seeds:
            for r in timings:
                by_run.setdefault(r["run"], []).append(r["ratio"])
        out[name] = {"bleu": mean("bleu"), "speed": mean("speed"),
                     "ratio": statistics.mean(statistics.mean(v) for v in by_run.values()),
                     "engines": ", ".join(dict.fromkeys(r["engine"] for _, timings in seeds
                                                        for r in timings)),
                     "timed": ", ".join(model[len(name) + 1:] for model, _ in seeds)}
    return out


def cells(runs: Dict[str, List[Dict]], anchor: str = "vanilla",
          not_kept: Sequence[str] = ()) -> Tuple[Dict[str, str], List[str]]:
    """``({configuration: its column cell}, notes)``: :func:`summaries` as BLEU / tok/s
    (engines) / ratio (seeds timed). A configuration none of whose models was timed and some of
    whose are in ``not_kept`` (:func:`load`) says so."""
    groups = summaries(runs, anchor)
    out = {name: (f"{g['bleu']:.2f} / {g['speed']:,.0f} ({g['engines']}) / "
                  f"{g['ratio']:.2f} ({g['timed']})") for name, g in groups.items()}
    for model in not_kept:
        out.setdefault(configuration(model), "model not kept")
    lost = [m for m in not_kept if configuration(m) in groups]
    spread = [f"{min(speeds):,.0f}-{max(speeds):,.0f} tok/s in `{Path(folder).name}`"
              for folder, speeds in anchor_speeds(runs, anchor).items() if len(speeds) > 1]
    notes = [f"The beam-1 column: `{FOLDER}/RUN/models/*.json`, each run with vanilla 3+3 timed "
             f"in it ({', '.join(f'`{Path(f).name}`' for f in runs)}); per model its fastest "
             "engine by CPU tokens/s, and the BLEU of that engine's output at beam 1, the seeds "
             "timed in brackets"
             + (f" (not kept, so not timed: {', '.join(lost)}; `{FOLDER}/{NOT_KEPT}`)"
                if lost else "")
             + f"; \"-\": not timed at beam 1"
             + (f". Vanilla 3+3's own seeds, one architecture in one run, read "
                f"{'; '.join(spread)}: ratios within that spread are noise" if spread else "")
             + f". {PUBLISHED}."] if runs else []
    return out, notes


def load(results: str, anchor: str = "vanilla") -> Dict[str, List[Dict]]:
    return frontier_report.later_runs(str(Path(results) / FOLDER), anchor)


def not_kept(results: str) -> List[str]:
    """The final models whose files are gone (``beam1/NOT_KEPT.json``, with why)."""
    path = Path(results) / FOLDER / NOT_KEPT
    return json.loads(path.read_text(encoding="utf-8"))["models"] if path.exists() else []
