"""The answers the fixed-size study gives (issue 55): narrower or shared at one size and depth,
whether telling a shared layer its depth pays, and the fastest model at beam 1 within vanilla
3+3's BLEU. Each is a line of ``summary.md`` and of the README, rendered from what the budget's
tables already computed (:func:`harness.budget_findings.comparisons`, the crossover curves, the
training rates, the frontier's and the beam-1 runs' cells); a gap that is not resolved says how
many seeds a side would resolve it (:func:`harness.statistics.seeds_to_resolve`)."""

from typing import Dict, List, Optional

from harness import beam1 as beam1_runs
from harness.budget_findings import crossover_points
from harness.budget_rates import rate_ratio
from harness.budget_summary import speed_cells
from harness.configs import BASELINE
from harness.frontier_report import SHORT_ENGINES
from harness.readme_table import fastest_cell, verdict
from harness.statistics import fmt_seeds_to_resolve

SHARED = "cycle_rev_2L"
#: the configuration that narrows instead of sharing, at the shared model's size and depth
NARROW = "vanilla_2L_narrow"
#: cycle_rev 6+6/3 told its depth: its own norms and biases, a rank-8 LoRA delta per depth
DEPTH_CONDITIONED = ("cycle_rev_2L_depthcond", "cycle_rev_2L_lora8")
TITLE = "At one size: narrow or share, and does a shared layer told its depth pay"


def named(name: str) -> str:
    return "vanilla 3+3" if name == BASELINE else f"`{name}`"


def seeds(finals, name: str) -> str:
    n = len(finals[name])
    return f"{n} seed{'s' if n > 1 else ''}"


def gap(d, spec: str, unit: str = "", lower_is_better: bool = False) -> str:
    """A difference with its verdict, and how many seeds would resolve it where it is not."""
    more = fmt_seeds_to_resolve(d)
    return verdict(d, spec, lower_is_better) + unit + (f" ({more})" if more else "")


def against(name: str, other: str, finals, versus, stages, rates, pools) -> str:
    """``name`` against ``other`` (vanilla 3+3 or its pair): valid loss and BLEU at equal
    updates; valid loss at equal training CPU (the curves' last common point), the CPU ratio
    from one rates run that measured both (:func:`rate_ratio`)."""
    diff = versus[name] if other == BASELINE else versus[name].get("pair", {})
    if other != BASELINE and diff.get("name") != other:
        return ""
    parts = [f"against {named(other)} ({seeds(finals, other)}), equal updates: valid loss "
             + gap(diff["valid_loss"], "+.3f", " bits", lower_is_better=True)
             + ", BLEU " + gap(diff["bleu"], "+.2f")]
    ratio = rate_ratio(rates, other, name)
    if ratio and name in stages and other in stages:
        points = crossover_points(stages, other, name, ratio, pools.of("valid_loss", other))
        if points:
            u, at, d = points[-1]
            parts.append(f"equal training CPU (x{ratio:.2f} CPU per update): valid loss "
                         + verdict(d, "+.3f", lower_is_better=True)
                         + f" bits, its {u:,} updates against {at:,}")
    return "; ".join(parts)


def speed(name: str, cells: Dict, beam1: Dict) -> str:
    one = beam1.get(name)
    return (f"fastest engine b=1 / b=32 {fastest_cell(cells.get(name, {}), list(SHORT_ENGINES))}"
            + (f", beam 1 x{one['ratio']:.2f} vanilla 3+3 ({one['speed']:,.0f} tok/s per thread)"
               if one else ""))


def lines(finals, versus, stages, rates: Optional[Dict], pools, cells: Dict,
          beam1: Dict, beam1_noise: Optional[float] = None) -> List[str]:
    """The answers as bullets (none for a question whose configurations have no final model).
    ``rates``: :func:`harness.budget_rates.training_rates`; ``cells``:
    :func:`harness.budget_summary.speed_cells`; ``beam1``: :func:`harness.beam1.summaries`,
    and ``beam1_noise`` the largest ratio between vanilla 3+3's own seeds in one beam-1 run."""
    out = []
    if NARROW in finals and SHARED in finals:
        out.append(
            f"- **Narrower or shared, at one size and depth** (6+6): `{NARROW}` "
            f"({finals[NARROW][min(finals[NARROW])]['params']:,} parameters, "
            f"{seeds(finals, NARROW)}) "
            + against(NARROW, SHARED, finals, versus, stages, rates, pools)
            + f"; {speed(NARROW, cells, beam1)} against {speed(SHARED, cells, beam1)}.")
    for name in (n for n in DEPTH_CONDITIONED if n in finals):
        out.append(f"- **`{name}`** ({finals[name][min(finals[name])]['params']:,} parameters, "
                   f"{seeds(finals, name)}) "
                   + "; ".join(a for a in (against(name, other, finals, versus, stages,
                                                   rates, pools)
                                           for other in (BASELINE, SHARED)) if a)
                   + f"; {speed(name, cells, beam1)}.")
    level = [n for n in beam1 if n == BASELINE or (n in versus and not (
        versus[n]["bleu"].resolved and versus[n]["bleu"].delta < 0))]
    if level:
        best = max(level, key=lambda n: beam1[n]["speed"])
        b, base = beam1[best], beam1.get(BASELINE)
        out.append(f"- **Fastest at beam 1 within vanilla 3+3's BLEU** (batch 32, one thread; "
                   f"the {len(level)} configurations timed at beam 1 and not resolved below it "
                   f"at beam 4): {named(best)}, {b['speed']:,.0f} tok/s per thread in "
                   f"{b['engines']}, x{b['ratio']:.2f} vanilla 3+3 in the same runs, BLEU "
                   f"{b['bleu']:.2f} at beam 1"
                   + (f" (vanilla 3+3: {base['speed']:,.0f} tok/s, BLEU {base['bleu']:.2f})"
                      if base and best != BASELINE else "")
                   + (f"; vanilla 3+3's own seeds differ by up to x{beam1_noise:.2f} in one run, "
                      "and a ratio inside that is noise" if beam1_noise else "") + ".")
    return out


def section(finals, versus, stages, rates, pools, frontier, later, runs: Dict[str, List[Dict]],
            level: str = "##") -> List[str]:
    """:func:`lines` under their title (a heading of ``level``), or nothing before their runs:
    summary.md's (:func:`harness.budget_report.render`) and the README's
    (:mod:`~harness.readme_table`). ``frontier`` and ``later``: the frontier's records and the
    later runs' (:func:`harness.budget_summary.speed_cells`); ``runs``: the beam-1 runs
    (:func:`harness.beam1.load`)."""
    spreads = [max(v) / min(v) for v in beam1_runs.anchor_speeds(runs).values() if len(v) > 1]
    answers = lines(finals, versus, stages, rates, pools, speed_cells(frontier, later)[0],
                    beam1_runs.summaries(runs), max(spreads) if spreads else None)
    return [f"{level} {TITLE}", "", *answers, ""] if answers else []
