"""What the budget tables conclude from the final models: pure functions of the records
:func:`harness.budget_report.load` reads, with the statistics of
:mod:`~harness.statistics`."""

import dataclasses
import statistics
from typing import Dict, List, Optional, Tuple

from harness.budget_curve import NAMES
from harness.budget_long import LONG
from harness.budget_rates import rate_ratio
from harness.budget_summary import valid_losses
from harness.configs import BASELINE
from harness.statistics import (POOLING_MARK, Pool, compare, compare_bleu, fmt_difference,
                                pooled_sd)


def row_names(*by_name: Dict) -> List[str]:
    """The configurations that have records in any of ``by_name``, in the suite's order
    (:data:`~harness.budget_curve.NAMES`), then any other by name: a row is drawn from
    records, never from the catalogue."""
    names = set().union(*by_name)
    return [n for n in NAMES if n in names] + sorted(names - set(NAMES))


def row_record(name: str, stages, finals) -> Dict:
    """A record of configuration ``name`` carrying its row's fields (each run and milestone
    record does, :func:`harness.configs.row_fields`): its first final record by seed, else
    the first seed's latest milestone."""
    if finals.get(name):
        return finals[name][min(finals[name])]
    by_seed = stages[name]
    first = by_seed[min(s for s in by_seed if by_seed[s])]
    return first[max(first)]


def averaging_lines(stages, finals) -> List[str]:
    """Averaging's gain per run: the final averaged model against the checkpoint it ends at."""
    lines = ["## What averaging adds, per run (final average of the last 5 checkpoints against "
             "the last checkpoint)", "",
             "| run | updates | checkpoint BLEU | averaged BLEU | gain | checkpoint valid loss "
             "| averaged valid loss |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in (n for n in NAMES if n in finals):
        for seed, f in sorted(finals[name].items()):
            m = stages.get(name, {}).get(seed, {}).get(f["updates"])
            if not m:
                continue
            avg_loss = f.get("average_valid_loss")
            lines.append(f"| {name}_s{seed} | {f['updates']:,} | {m['test']['bleu']:.2f} | "
                         f"{f['test']['bleu']:.2f} | {f['test']['bleu'] - m['test']['bleu']:+.2f} | "
                         f"{m['valid_loss']:.3f} | "
                         f"{f'{avg_loss:.3f}' if avg_loss is not None else '-'} |")
    return lines + [""]


def describe(record: Dict):
    """(label, "enc+dec" layers) of a configuration, from one of its records
    (:func:`row_record`)."""
    return record["label"], f"{record['N']}+{record['decoder_N']}"


def method_note(pools: "Pools") -> str:
    """How the tables' differences were computed, with the pooled seed sds they used and over
    which rows each was pooled."""
    def sd(metric, spec):
        parts = [f"{group} rows ({', '.join(pools.members[group])}): "
                 + (f"{value:{spec}}, {df} degrees of freedom" if value is not None else "none yet")
                 for group, (value, df) in sorted(pools.by_group[metric].items())]
        return "; ".join(parts)
    return ("Differences between configurations (final models): the difference of the seed "
            "means with a 95% t interval whose seed variance is pooled over the configurations "
            "that are alike: trained on the same targets with one recipe, the corpus's "
            "references (raw) or a teacher's outputs (distilled). A distilled student's seeds "
            "vary less (its targets are one teacher's, not the references), so it is pooled "
            "apart, and a difference across the two pools carries each side's own variance "
            "(Welch-Satterthwaite degrees of freedom). Seed sd of BLEU: "
            f"{sd('bleu', '.2f')}. Seed sd of valid loss (bits): {sd('valid_loss', '.3f')}. "
            f"{POOLING_MARK} marks a verdict that turns (resolved to not, or back) when the seed "
            "sd is instead pooled over every row, alike or not, or when both sides of a "
            "difference across two pools are given the larger pool's sd (as if the distilled "
            "student varied like the rows trained on the references): such a verdict rests on "
            "the pooling, and no finding is drawn from it. For BLEU the interval adds the "
            "test-sampling variance of a paired sentence bootstrap (1,000 resamples of the test "
            "sentences, the same for every model): how far the difference of the two seed means "
            "would move on another test set of this size drawn like this one, which the seeds, "
            "all scored on one test set, do not show. \"not resolved\" where the interval "
            "covers 0 (`harness/statistics.py`). The sentence bootstrap between two single "
            "models of one seed (`tables.md`, last BLEU column) is test sampling only, never a "
            "configuration's significance. Valid loss is compared only between configurations "
            "trained on the same targets: a distilled student's is its likelihood of the real "
            "references after training on the teacher's outputs, which distillation raises "
            "while it raises BLEU, so its rows compare by BLEU and chrF.")


#: the comparisons whose crossover the tables state: (unshared baseline, shared configuration)
CROSSOVER_PAIRS = [("vanilla", "cycle_rev_2L")]


CROSSOVER_TITLE = "Crossover of valid loss"


#: two models whose int8 sizes differ by less than this share are the same size
SAME_SIZE = 0.01


def crossover_lines(stages, rates: Optional[Dict],
                    pooled: Tuple[Optional[float], int] = (None, 0),
                    title: str = CROSSOVER_TITLE,
                    int8_mb: Optional[Dict[str, float]] = None) -> List[str]:
    """Where the shared configuration's valid loss (mean over seeds, every 100 updates) meets
    its baseline's, at equal updates and at equal training CPU (updates scaled by the
    one-machine rate ratio, :func:`~harness.budget_rates.rate_ratio` of ``rates``), as
    measured: the gap at the last update both reach with its 95% interval over seeds
    (``pooled``: the seed sd of valid loss and its degrees of freedom, :func:`comparisons`),
    and the first point where the shared one is level or ahead with how many validations from
    there it stays so (mean curves inside seed noise cross back and forth), or that there is
    none. With ``int8_mb`` (CTranslate2 int8 MB per configuration), what equal size means for
    the pair: :func:`equal_size_line`."""
    lines = [f"## {title} (mean over seeds; negative: the shared model is ahead)", ""]
    for base, shared in CROSSOVER_PAIRS:
        if base not in stages or shared not in stages:
            continue
        ratio = rate_ratio(rates, base, shared)
        axes = [("equal updates", 1.0)] + ([("equal training CPU", ratio)] if ratio else [])
        kept = {n: furthest_seeds(stages[n]) for n in (shared, base)}
        seeds = f"{len(kept[shared])} vs {len(kept[base])} seeds" + "".join(
            f"; {n} s{s} left out, at {max(stages[n][s]):,} so far"
            for n in (shared, base) for s in sorted(stages[n]) if stages[n][s] and s not in kept[n])
        for axis, scale in axes:
            points = crossover_points(stages, base, shared, scale, pooled)
            if not points:
                continue
            level = next((p for p in points if p[2].delta <= 0), None)
            u, at, gap = points[-1]
            where = f"no crossover up to {u:,} updates"
            if level:  # the mean curves cross back and forth within seed noise: say how often
                after = points[points.index(level):]
                where = (f"first level or ahead at {level[0]:,} updates ({base} at {level[1]:,}),"
                         f" level or ahead at {sum(p[2].delta <= 0 for p in after)} of the "
                         f"{len(after)} validations from there")
            lines.append(f"- {shared} against {base}, {axis}"
                         + (f" (x{scale:.2f} CPU per update)" if scale != 1.0 else "")
                         + f": {_bits(gap)} at {u:,} updates ({base} at "
                         f"{at:,}); {where} ({seeds}).")
        if int8_mb:
            lines.append(equal_size_line(base, shared, int8_mb))
    return lines + [""] if len(lines) > 2 else []


def crossover_points(stages, base: str, other: str, scale: float, pooled: Pool):
    """``[(update of other, update of base, valid-loss Difference other - base)]`` at each of
    ``other``'s counted validations whose update times ``scale`` (1: equal updates; the CPU
    ratio: equal training CPU) is one of ``base``'s, over the seeds :func:`furthest_seeds`
    keeps."""
    (bu, bl), (su, sl) = valid_curve(stages[base]), valid_curve(stages[other])
    base_at = dict(zip(bu, bl))
    points = []
    for u, losses in zip(su, sl):
        at = int(round(u * scale / 100) * 100)
        if at in base_at:
            points.append((u, at, compare(base_at[at], losses, pooled)))
    return points


def long_bleu_lines(long_stages, results: str, refs: List[str]) -> List[str]:
    """Each crossover pair's averaged test BLEU at the furthest milestone every kept seed of both
    reached in ``long/`` (:func:`furthest_seeds`), with its 95% interval: the seed sd pooled over
    the pair's own long runs (no other rows were trained that long) plus test sampling."""
    lines = []
    for base, shared in CROSSOVER_PAIRS:
        if base not in long_stages or shared not in long_stages:
            continue
        kept = {n: furthest_seeds(long_stages[n]) for n in (base, shared)}
        at = min(max(long_stages[n][s]) for n in kept for s in kept[n])
        side = {n: [{"test": {"bleu": long_stages[n][s][at]["average"]["test"]["bleu"],
                              "hypotheses": f"{LONG}/"
                              f"{long_stages[n][s][at]['average']['test']['hypotheses']}"}}
                    for s in kept[n] if long_stages[n][s].get(at, {}).get("average")]
                for n in (base, shared)}
        if not all(side.values()):
            continue
        pool = pooled_sd([[r["test"]["bleu"] for r in side[n]] for n in (base, shared)])
        gap = compare_bleu(side[base], side[shared], pool, results, refs)
        lines.append(f"- {shared} against {base}, averaged test BLEU at {at:,} updates: "
                     f"{fmt_difference(gap, seed_counts=False)} ({len(side[shared])} vs "
                     f"{len(side[base])} seeds; seed sd {pool[0]:.2f} pooled over these two "
                     f"rows, {pool[1]} degrees of freedom, and test sampling).")
    return lines + [""] if lines else []


def equal_size_line(base: str, shared: str, int8_mb: Dict[str, float]) -> str:
    """Size does not change with training, so two models of the same int8 size compare at
    equal size exactly as at equal updates; of different sizes, no pair of equal size was
    trained and the axis has no measurement."""
    head = f"- {shared} against {base}, equal size"
    if base not in int8_mb or shared not in int8_mb:
        return f"{head}: not measured (no int8 export of both in the frontier)."
    a, b = int8_mb[shared], int8_mb[base]
    sizes = f"(int8 {a:.2f} MB against {b:.2f})"
    if abs(a - b) < SAME_SIZE * b:
        return f"{head} {sizes}: the same size at every update, so as at equal updates above."
    return f"{head} {sizes}: not the same size, and no model of the other's size was trained."


def _bits(d) -> str:
    """A valid-loss difference in bits, with its interval where seed variance was counted
    (the line states the seed counts)."""
    return (f"{d.delta:+.3f} bits" if d.lo is None
            else f"{fmt_difference(d, '+.3f', seed_counts=False)} bits")


@dataclasses.dataclass(frozen=True)
class Pools:
    """The seed sds of a table's final models: ``by_group[metric][group]`` pooled over the
    configurations of one group of alike rows (``training_data`` of their records),
    ``every_row[metric]`` over all of them (the pooling a verdict is checked against);
    ``group[name]`` is a configuration's group."""
    by_group: Dict[str, Dict[str, Pool]]
    every_row: Dict[str, Pool]
    group: Dict[str, str]

    @property
    def members(self) -> Dict[str, List[str]]:
        """{group: its configurations}, in the order of :attr:`group`."""
        return {g: [n for n in self.group if self.group[n] == g]
                for g in sorted(set(self.group.values()))}

    def of(self, metric: str, name: str) -> Pool:
        return self.by_group[metric][self.group[name]]


def pooled_by_group(values: Dict[str, List[float]], group: Dict[str, str]) -> Dict[str, Pool]:
    """{group: the seed sd pooled over that group's configurations} of ``values``
    ({configuration: per-seed values})."""
    return {g: pooled_sd([v for n, v in values.items() if group[n] == g])
            for g in sorted(set(group[n] for n in values))}


def pooled_comparison(metric: str, a: str, b: str, pools: Pools, compare_with) -> "Difference":
    """``compare_with(pool_a, pool_b)`` under the pools of alike rows, marked where another
    pooling turns its verdict: the seed sd pooled over every row, or, across two pools, both
    sides given the larger pool's sd (so a verdict that rests on a low-variance group's
    spread, a distilled student's, is marked)."""
    pool_a, pool_b = pools.of(metric, a), pools.of(metric, b)
    alike = compare_with(pool_a, pool_b)
    others = [(pools.every_row[metric], None)]
    if pool_a != pool_b and None not in (pool_a[0], pool_b[0]):
        larger = max(pool_a, pool_b, key=lambda pool: pool[0])
        others.append((larger, None))
    turned = any(compare_with(*other).resolved != alike.resolved for other in others)
    return dataclasses.replace(alike, depends_on_pooling=turned)


def comparisons(finals, results: str, refs: List[str], baseline: str = BASELINE):
    """({configuration: {"bleu": Difference, "valid_loss": Difference, "pair": {...}}},
    :class:`Pools`): each configuration's final models against vanilla 3+3's and its own
    unshared pair's (``pair`` in its records), BLEU counting seeds and test sampling, valid
    loss seeds, each with the seed sd of its rows' pools."""
    runs, losses, pools = _pooled(finals)

    def versus(a: str, b: str) -> Dict:
        out = {"bleu": pooled_comparison("bleu", a, b, pools, lambda pa, pb: compare_bleu(
            runs[a], runs[b], pa, results, refs, pb))}
        if (a in losses and b in losses
                and runs[a][0]["training_data"] == runs[b][0]["training_data"]):
            out["valid_loss"] = pooled_comparison("valid_loss", a, b, pools, lambda pa, pb: compare(
                losses[a], losses[b], pa, pooled_b=pb))
        return out

    out = {}
    for name in runs:
        if name == baseline or baseline not in runs:
            continue
        out[name] = versus(baseline, name)
        pair = runs[name][0]["pair"]
        if pair in runs:
            label, layers = describe(runs[pair][0])
            out[name]["pair"] = {"label": f"{label} {layers}", "name": pair, **versus(pair, name)}
    return out, pools


def _pooled(finals):
    """(each configuration's runs in seed order, its measured valid losses (where it has any),
    :class:`Pools` of BLEU and valid loss)."""
    runs = {n: [by_seed[s] for s in sorted(by_seed)] for n, by_seed in finals.items()}
    losses = {n: valid_losses(rs) for n, rs in runs.items() if valid_losses(rs)}
    bleu = {n: [r["test"]["bleu"] for r in rs] for n, rs in runs.items()}
    group = {n: rs[0]["training_data"] for n, rs in runs.items()}
    return runs, losses, Pools(
        by_group={"bleu": pooled_by_group(bleu, group),
                  "valid_loss": pooled_by_group(losses, group)},
        every_row={"bleu": pooled_sd(list(bleu.values())),
                   "valid_loss": pooled_sd(list(losses.values()))},
        group=group)


def best_sets(finals, results: str, refs: List[str]) -> Dict[str, Dict]:
    """{"bleu"/"valid_loss": {"best": the configuration with the best mean, "set": every
    configuration not resolved worse than it}}: "best" as a set, not the maximum of noisy
    means (the same statistics as :func:`comparisons`)."""
    runs, losses, pools = _pooled(finals)
    bleu = {n: statistics.mean(r["test"]["bleu"] for r in rs) for n, rs in runs.items()}
    top = max(bleu, key=bleu.get)
    out = {"bleu": {"best": top, "set": [n for n in runs if n == top or not (
        compare_bleu(runs[top], runs[n], pools.of("bleu", top), results, refs,
                     pools.of("bleu", n)).hi or 0) < 0]}}
    raw = {n: v for n, v in losses.items() if runs[n][0]["training_data"] == "raw"}
    if raw:
        low = min(raw, key=lambda n: statistics.mean(raw[n]))
        out["valid_loss"] = {"best": low, "set": [n for n in raw if n == low or not (
            compare(raw[low], raw[n], pools.of("valid_loss", low)).lo or 0) > 0],
            "left_out": sorted(set(losses) - set(raw))}
    return out


def best_lines(best: Dict[str, Dict]) -> List[str]:
    words = {"bleu": "test BLEU", "valid_loss": "valid loss"}
    return [f"Best by {words[k]} (the best mean, {v['best']}, and every configuration not "
            f"resolved worse than it): {', '.join(v['set'])}."
            + (f" Left out as trained on the teacher's outputs: {', '.join(v['left_out'])}."
               if v.get("left_out") else "") for k, v in best.items()]


def furthest_seeds(by_seed: Dict[int, Dict[int, Dict]]) -> List[int]:
    """The seeds whose latest milestone is the furthest any seed reached: a run still in
    progress is left out of a curve rather than cutting it short where it stands."""
    latest = {s: max(m) for s, m in by_seed.items() if m}
    return sorted(s for s, u in latest.items() if u == max(latest.values()))


def valid_curve(by_seed: Dict[int, Dict[int, Dict]]):
    """(updates, [per-seed valid losses]) at the counted validations (every
    ``validation_interval`` updates of its record) every seed of :func:`furthest_seeds` has,
    from each one's latest milestone's curve."""
    curves = []
    for milestones_ in (by_seed[s] for s in furthest_seeds(by_seed)):
        latest = milestones_[max(milestones_)]
        interval = latest["validation_interval"]
        curves.append({p["update"]: p["valid_loss"] for p in latest.get("curve", [])
                       if p.get("valid_loss") is not None and p["update"] % interval == 0})
    common = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    return common, [[c[u] for c in curves] for u in common]
