"""Training CPU per update of the budget's configurations, as the tables read it: one run of
``budget rates`` on one machine (:data:`RATE_FILE`), and for configurations added after it, a
later run that timed them beside vanilla 3+3 (:data:`RATE_SUPPLEMENTS`). A later run's rows
enter as its ratio over its own vanilla 3+3 times the first run's vanilla rate, marked, because
the ratios move with the CPU (the note says by how much, from the configurations both measured)."""

from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

from harness.budget_curve import NAMES
from harness.configs import BASELINE
from harness.queue import read_record
from harness.statistics import markdown_table

RATE_FILE = "train_rate.json"
#: later rate runs, each with vanilla 3+3 among its rows; the first to hold a configuration
#: that RATE_FILE lacks gives its rate
RATE_SUPPLEMENTS = ("train_rate_fixed_size.json",)
SCALED_MARK = "‡"


def _rows_at(data: Dict, threads) -> Dict[str, Dict]:
    return {r["config"]: r for r in data["rows"] if r["threads"] == threads}


def training_rates(results: str, finals) -> Optional[Dict]:
    """``RATE_FILE`` at one thread count ({"rows": {configuration: row}, "supplements": [...],
    ...}) or None: the file's own, or where it measured several, the one most final records
    trained with; then the rows of :data:`RATE_SUPPLEMENTS` it lacks, scaled by vanilla 3+3 and
    marked ``scaled_from``."""
    path = Path(results) / RATE_FILE
    if not path.exists():
        return None
    data = read_record(path)
    measured = {r["threads"] for r in data["rows"]}
    trained = Counter(f["threads"] for by_seed in finals.values() for f in by_seed.values()
                      if f["threads"] in measured)
    threads = (trained.most_common(1)[0][0] if trained else max(measured)) if measured else None
    rows = _rows_at(data, threads)
    own = dict(rows)
    supplements = []
    for name in RATE_SUPPLEMENTS:
        if not (Path(results) / name).exists() or BASELINE not in own:
            continue
        later = read_record(Path(results) / name)
        theirs = _rows_at(later, threads)
        if BASELINE not in theirs:
            continue
        scale = {key: own[BASELINE][key] / theirs[BASELINE][key]
                 for key in ("steady_cpu_s_per_update", "steady_s_per_update")}
        added = [c for c in theirs if c not in rows]
        for config in added:
            rows[config] = {**theirs[config], "scaled_from": name,
                            **{key: theirs[config][key] * s for key, s in scale.items()}}
        supplements.append({"file": name, "command": later["command"],
                            "machine": later.get("machine", {}), "added": added,
                            "ratios": {c: theirs[c]["steady_cpu_s_per_update"]
                                       / theirs[BASELINE]["steady_cpu_s_per_update"]
                                       for c in theirs},
                            "both": {c: (own[c]["steady_cpu_s_per_update"]
                                         / own[BASELINE]["steady_cpu_s_per_update"],
                                         theirs[c]["steady_cpu_s_per_update"]
                                         / theirs[BASELINE]["steady_cpu_s_per_update"])
                                     for c in theirs if c in own and c != BASELINE}})
    return {**data, "rows": rows, "supplements": supplements}


def rate_ratio(rates: Optional[Dict], base: str, other: str) -> Optional[float]:
    """``other``'s training CPU per update over ``base``'s, from one run that measured both:
    :data:`RATE_FILE` where it has both, else the supplement that gave one of them and measured
    the other too (the ratios move with the CPU, so two runs' rows are not divided); None where
    no run measured both."""
    rows = (rates or {}).get("rows", {})
    if base not in rows or other not in rows:
        return None
    if "scaled_from" not in rows[base] and "scaled_from" not in rows[other]:
        return rows[other]["steady_cpu_s_per_update"] / rows[base]["steady_cpu_s_per_update"]
    for s in rates.get("supplements", []):
        if {base, other} & set(s["added"]) and {base, other} <= set(s["ratios"]):
            return s["ratios"][other] / s["ratios"][base]
    return None


def scaled(rates: Optional[Dict], shown) -> List[str]:
    """The configurations among ``shown`` whose rate a supplement gave."""
    return [n for n in shown if "scaled_from" in (rates or {"rows": {}})["rows"].get(n, {})]


def scaled_note(rates: Optional[Dict], shown) -> List[str]:
    """One line per supplement that gave a row among ``shown``: which rows, from which run and
    CPU, and how the ratios of the configurations both runs measured differ."""
    notes = []
    for s in (rates or {}).get("supplements", []):
        added = [c for c in s["added"] if c in shown]
        if not added:
            continue
        both = ", ".join(f"{c} x{b:.2f} in it, x{a:.2f} in {RATE_FILE}"
                         for c, (a, b) in s["both"].items())
        notes.append(
            f"{SCALED_MARK} training CPU of {', '.join(added)}: `{s['file']}` (`{s['command']}`, "
            f"{s['machine'].get('cpu_model')}), a later run beside vanilla 3+3, as its ratio over "
            f"that run's vanilla 3+3, times {RATE_FILE}'s; ratios move with the CPU ({both}).")
    return notes


def rate_table(rates: Dict, layers: Dict[str, str]) -> List[str]:
    """The one-machine rates of ``RATE_FILE``, each configuration with its ``layers``
    ("enc+dec", from its records); the supplements' rows are in their own files' tables."""
    rows = rates["rows"]
    base = rows.get(BASELINE, {}).get("steady_cpu_s_per_update")
    machine = rates.get("machine", {})
    lines = ["## Training cost per update, one machine, one run", "",
             f"`{rates['command']}` ({rates.get('started', '')}, {machine.get('cpu_model')}, "
             f"{machine.get('cpu_count')} cores, load average at the end "
             f"{(rates.get('load_average_at_end') or [0])[0]:.2f}, its own): each configuration's "
             "budget command from scratch, steady state after the first logged interval; CPU "
             "seconds of the fairseq-train process (all its threads) per update.", "",
             *markdown_table(["configuration", "layers enc+dec", "CPU s/update",
                              "× vanilla 3+3", "wall s/update"], align="llrrr")]
    for name in (n for n in NAMES if n in rows and "scaled_from" not in rows[n]):
        r = rows[name]
        ratio = f"{r['steady_cpu_s_per_update'] / base:.2f}" if base else "-"
        lines.append(f"| {name} | {layers.get(name, '-')} | {r['steady_cpu_s_per_update']:.3f} | "
                     f"{ratio} | {r['steady_s_per_update']:.3f} |")
    extra = [f"`{Path(s['file']).with_suffix('.md')}`" for s in rates.get("supplements", [])
             if s["added"]]
    return lines + [""] + ([f"Measured later, with vanilla 3+3 in the same run: {', '.join(extra)}.", ""]
                           if extra else [])
