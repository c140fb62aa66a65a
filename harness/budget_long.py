"""Takase's pair to 16,000 updates (budget ``budget_long``, ``RESULTS/long/``) in the budget
tables: a new seed's averaged 8,000-update milestone stands as that seed's final model, and a
seed the 8,000-update suite also ran is checked for reproduction."""

from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

from harness.budget_curve import NAMES
from harness.configs import ROW_FIELDS
from harness.statistics import markdown_row, markdown_table

#: the 16,000-update runs of Takase's pair (budget ``budget_long``), under RESULTS/long/; their
#: 8,000-update milestone, averaged as a final model is, counts as a seed of the 8,000-update
#: tables where the 8,000-update suite has no run of that seed
LONG, LONG_AT = "long", 8000


def with_long_seeds(finals, long_stages, at: int):
    """``finals`` with each long run's averaged milestone at ``at`` updates as the final record
    of a seed the suite has not run (a seed it has run is a reproducibility check instead,
    :func:`long_lines`)."""
    out = defaultdict(dict, {n: dict(by_seed) for n, by_seed in finals.items()})
    for name, by_seed in long_stages.items():
        like = next(iter(finals.get(name, {}).values()), None)
        for seed, ms in by_seed.items():
            m = ms.get(at)
            if seed in out[name] or not m or not m.get("average") or not like:
                continue
            avg = m["average"]
            out[name][seed] = {
                **{k: m[k] for k in ROW_FIELDS}, "name": name,
                "seed": seed, "params": m["params"], "updates": at,
                "test": {**avg["test"], "hypotheses": f"{LONG}/{avg['test']['hypotheses']}"},
                "average_valid_loss": avg["valid_loss"], "average_of": avg["of"],
                "from": f"{LONG}/milestones/{name}_s{seed}_u{at}.json"}
    return out


def long_lines(long_stages, stages, results: str) -> List[str]:
    """The 16,000-update runs milestone by milestone (checkpoint and averaged), and for a seed
    the 8,000-update suite also ran, whether its milestones reproduce that run's."""
    if not long_stages:
        return []
    updates = sorted({k for by_seed in long_stages.values() for ms in by_seed.values() for k in ms})
    lines = ["## Takase's pair to 16,000 updates (`long/`, budget `budget_long`)", "",
             "Each cell: checkpoint BLEU / averaged BLEU / averaged valid loss (bits).", "",
             *markdown_table(["run", *(f"{k:,}" for k in updates),
                              "reproduces the 8,000-update run"], align="l" + "r" * len(updates))]
    for name in (n for n in NAMES if n in long_stages):
        for seed, ms in sorted(long_stages[name].items()):
            cells = [f"{ms[k]['test']['bleu']:.2f} / {ms[k]['average']['test']['bleu']:.2f} / "
                     f"{ms[k]['average']['valid_loss']:.3f}" if k in ms else "-" for k in updates]
            lines.append(markdown_row([f"{name}_s{seed}", *cells, reproduction(
                ms, stages.get(name, {}).get(seed), str(Path(results) / LONG), results)]))
    return lines + [""]


def reproduction(long_ms: Dict[int, Dict], short_ms: Optional[Dict[int, Dict]],
                 long_folder: str, short_folder: str) -> str:
    """Which common milestones have the same logged valid loss and byte-identical test
    hypotheses in both runs (each run's hypotheses under its own results folder); also what
    ``python -m harness.budget reproduce`` reports of a row trained again."""
    if not short_ms:
        return "new seed"
    out = []
    for k in sorted(set(long_ms) & set(short_ms)):
        same_loss = long_ms[k]["valid_loss"] == short_ms[k]["valid_loss"]
        same_hyps = ((Path(long_folder) / long_ms[k]["test"]["hypotheses"]).read_bytes()
                     == (Path(short_folder) / short_ms[k]["test"]["hypotheses"]).read_bytes())
        out.append(f"{k:,}: " + ("identical" if same_loss and same_hyps else
                                 f"valid loss {long_ms[k]['valid_loss']:.3f} vs "
                                 f"{short_ms[k]['valid_loss']:.3f}, hypotheses "
                                 f"{'identical' if same_hyps else 'differ'}"))
    return "; ".join(out) or "no common milestone"
