"""The one home of what the suites' reports share: the statistics (what a table may say about
configurations trained with several seeds, and what it may say about two single models), the
table cells and rows, the loaders of committed run records and the two-panel curve figures.

* :func:`compare`: the difference of two configurations' means, with a 95% interval that
  counts both sources of noise a reader's rerun would meet:

  - **seed variance**, as a t interval on the seed means. Every configuration here has one to
    three seeds, so a Welch interval per pair would have one or two degrees of freedom and say
    nothing; configurations that are alike (one recipe, the same training targets) share their
    seed variance, so it is pooled over them (:func:`pooled_sd`, its degrees of freedom the sum
    of each configuration's seeds less one). Rows that are not alike (a distilled student varies
    less over seeds than a model trained on the references) are pooled apart, and a difference
    across two pools carries each side's own variance with Welch-Satterthwaite's degrees of
    freedom, so a low-variance group never narrows another group's interval;
  - **test-sampling variance**: the same comparison on another sample of test sentences. A
    paired sentence bootstrap (:func:`test_sampling_variance`: the same resampled sentences
    for every hypothesis file of both configurations, corpus BLEU from sacreBLEU's sufficient
    statistics) gives the variance of the difference of the two seed means; it is added to
    the seed term.
* :func:`paired_bootstrap`: sacreBLEU's paired bootstrap between two *single models*. It
  measures test sampling only, for one seed of each, and is labelled so wherever it is shown;
  it is never a configuration's significance.

Valid loss goes through the same :func:`compare` without the test-sampling term (the valid
set is fixed and the loss has no per-sentence file here); its tables say so.
"""

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from fairseq_shared.data.pipeline import read_lines
from harness.queue import read_record

LEVEL = 0.95
BOOTSTRAP_SAMPLES = 1000


def t_quantile(df: int) -> float:
    """The two-sided :data:`LEVEL` quantile of Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.5 + LEVEL / 2, df))


@dataclass(frozen=True)
class SeedSummary:
    values: Tuple[float, ...]
    mean: float
    sd: Optional[float]  # None with one seed
    lo: Optional[float]
    hi: Optional[float]


def seed_summary(values: Sequence[float]) -> SeedSummary:
    """Mean, sd and the 95% t interval over seeds (no sd or interval from one seed)."""
    values = tuple(float(v) for v in values)
    if not values:
        raise ValueError("seed_summary: no values")
    mean = statistics.mean(values)
    if len(values) < 2:
        return SeedSummary(values, mean, None, None, None)
    sd = statistics.stdev(values)
    half = t_quantile(len(values) - 1) * sd / math.sqrt(len(values))
    return SeedSummary(values, mean, sd, mean - half, mean + half)


def pooled_sd(groups: Sequence[Sequence[float]]) -> Tuple[Optional[float], int]:
    """(pooled seed sd, its degrees of freedom) over groups of per-seed values; groups with
    one seed add nothing. (None, 0) when no group has two seeds."""
    ss = sum(sum((v - statistics.mean(g)) ** 2 for v in g) for g in groups if len(g) > 1)
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    return (math.sqrt(ss / df), df) if df else (None, 0)


#: (pooled seed sd, its degrees of freedom); (None, 0) where no configuration has two seeds
Pool = Tuple[Optional[float], int]


@dataclass(frozen=True)
class Difference:
    delta: float  # mean(b) - mean(a)
    lo: Optional[float]  # None: no seed variance to count (no group with two seeds)
    hi: Optional[float]
    seeds: Tuple[int, int]
    #: the verdict (resolved or not) differs when the seed sd is pooled another way
    #: (:func:`harness.budget_findings.comparisons`: over every row, alike or not)
    depends_on_pooling: bool = False
    #: what the interval was made of (:func:`seeds_to_resolve`): each side's pooled seed sd and
    #: its pool's degrees of freedom, whether both sides share one pool, the test-sampling term
    sds: Optional[Tuple[float, float]] = None
    dfs: Optional[Tuple[int, int]] = None
    one_pool: bool = True
    test_variance: float = 0.0

    @property
    def resolved(self) -> Optional[bool]:
        return None if self.lo is None else (self.lo > 0 or self.hi < 0)


def compare(a: Sequence[float], b: Sequence[float], pooled: Pool,
            test_variance: float = 0.0, pooled_b: Optional[Pool] = None) -> Difference:
    """mean(b) - mean(a) with its 95% interval: each side's seed variance over its seed count
    plus ``test_variance`` (:func:`test_sampling_variance`). ``pooled`` is the seed sd of
    ``a``'s pool and, unless ``pooled_b`` gives ``b``'s own, of ``b``'s too: one pool is t with
    its degrees of freedom; two pools are Welch-Satterthwaite's over their degrees of freedom."""
    pooled_b = pooled_b or pooled
    (sd_a, df_a), (sd_b, df_b) = pooled, pooled_b
    delta = statistics.mean(b) - statistics.mean(a)
    if sd_a is None or sd_b is None:
        return Difference(delta, None, None, (len(a), len(b)))
    half = _half_width((sd_a, sd_b), (df_a, df_b), pooled_b == pooled, (len(a), len(b)),
                       test_variance)
    return Difference(delta, delta - half, delta + half, (len(a), len(b)), sds=(sd_a, sd_b),
                      dfs=(df_a, df_b), one_pool=pooled_b == pooled, test_variance=test_variance)


def _half_width(sds, dfs, one_pool: bool, seeds, test_variance: float) -> float:
    """Half the 95% interval of a difference of two seed means (:func:`compare`)."""
    var_a, var_b = sds[0] ** 2 / seeds[0], sds[1] ** 2 / seeds[1]
    df = dfs[0] if one_pool else (var_a + var_b) ** 2 / (var_a ** 2 / dfs[0] + var_b ** 2 / dfs[1])
    return t_quantile(df) * math.sqrt(var_a + var_b + test_variance)


#: :func:`seeds_to_resolve` looks no further than this many seeds a side
MOST_SEEDS = 20


def seeds_to_resolve(d: Difference) -> Optional[int]:
    """The fewest seeds a side (at least the seeds each side has) with which the measured gap
    would be resolved, were it the true gap and the seed sds as measured: every added seed adds
    a degree of freedom to its side's pool, and the test-sampling term stays as measured (the
    seeds share one test set, so more of them hardly shrink it). 0 where it is resolved
    already; None where no seed variance was measured or no count up to :data:`MOST_SEEDS`
    would do (test sampling alone may cover a small gap)."""
    if d.lo is None or d.sds is None:
        return None
    if d.resolved:
        return 0
    for n in range(max(d.seeds), MOST_SEEDS + 1):
        added = (n - d.seeds[0], n - d.seeds[1])
        dfs = ((d.dfs[0] + sum(added),) * 2 if d.one_pool
               else (d.dfs[0] + added[0], d.dfs[1] + added[1]))
        if _half_width(d.sds, dfs, d.one_pool, (n, n), d.test_variance) < abs(d.delta):
            return n
    return None


def fmt_seeds_to_resolve(d: Difference) -> str:
    """What :func:`seeds_to_resolve` says, for a sentence: "" where the gap is resolved."""
    n = seeds_to_resolve(d)
    if n == 0 or d.lo is None:
        return ""
    return (f"{n} seeds a side would resolve it" if n
            else f"{MOST_SEEDS} seeds a side would not resolve it")


def sentence_stats(hyps: Sequence[str], refs: Sequence[str]) -> List[List[int]]:
    """sacreBLEU's per-sentence sufficient statistics, which add up to the corpus score's."""
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    return BLEU()._extract_corpus_statistics(list(hyps), [list(refs)])


def test_sampling_variance(a: Sequence[Sequence[Sequence[int]]],
                           b: Sequence[Sequence[Sequence[int]]],
                           samples: int = BOOTSTRAP_SAMPLES, seed: int = 12345) -> float:
    """Variance over paired sentence resamples of (mean corpus BLEU of ``b``'s models - that
    of ``a``'s); ``a`` and ``b``: per model, :func:`sentence_stats` on the same references."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    arrays = [np.asarray(s, dtype=np.int64) for s in (*a, *b)]
    n = arrays[0].shape[0]
    if any(x.shape[0] != n for x in arrays):
        raise ValueError("test_sampling_variance: hypothesis files of different lengths")
    rng, bleu = np.random.default_rng(seed), BLEU()
    deltas = []
    for _ in range(samples):
        ids = rng.integers(0, n, n)
        scores = [bleu._compute_score_from_stats(x[ids].sum(axis=0).tolist()).score for x in arrays]
        deltas.append(statistics.mean(scores[len(a):]) - statistics.mean(scores[:len(a)]))
    return statistics.variance(deltas)


def paired_bootstrap(base_hyps: List[str], hyps: List[str], refs: List[str]) -> Dict[str, float]:
    """Paired bootstrap p-values of ``hyps`` against ``base_hyps`` (test sampling only)."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    test = PairedTest([("base", base_hyps), ("system", hyps)],
                      {"BLEU": BLEU(references=[refs]), "chrF": CHRF(references=[refs])},
                      references=None, test_type="bs", n_samples=BOOTSTRAP_SAMPLES)
    _, res = test()
    return {"bleu_p": float(res["BLEU"][1].p_value), "chrf_p": float(res["chrF2"][1].p_value)}


def markdown_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[str]] = (),
                   align: str = "") -> List[str]:
    """Header, separator and rows; ``align``: a letter per column, ``r`` right (else left)."""
    sep = "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(head)))
    return [markdown_row(head), "|" + sep, *map(markdown_row, rows)]


def fmt_seeds(values: Sequence[float], spec: str = ".2f") -> str:
    """``30.28 ± 0.78 [23.27, 37.29] (29.73, 30.83)``: mean ± sd, the 95% interval over
    seeds, per seed; ``31.02 (one seed)`` for one; ``-`` for none."""
    if not values:
        return "-"
    s = seed_summary(values)
    if s.sd is None:
        return f"{s.mean:{spec}} (one seed)"
    per_seed = ", ".join(format(v, spec) for v in s.values)
    return f"{s.mean:{spec}} ± {s.sd:{spec}} [{s.lo:{spec}}, {s.hi:{spec}}] ({per_seed})"


def score_cells(runs: Sequence[Dict]) -> List[str]:
    """Valid loss, test BLEU and test chrF of a configuration's runs (:func:`fmt_seeds`)."""
    valid = [r["valid_loss"] for r in runs if r.get("valid_loss") is not None]
    return [fmt_seeds(valid, ".3f"), fmt_seeds([r["test"]["bleu"] for r in runs]),
            fmt_seeds([r["test"]["chrf"] for r in runs])]


def pending_line(label: str, columns: int) -> str:
    return f"| {label} | not run yet |" + " |" * (columns - 2)


#: marks a verdict that another pooling of the seed sd would turn (the method note says which)
POOLING_MARK = "†"


def fmt_difference(d: Difference, spec: str = "+.2f", seed_counts: bool = True) -> str:
    """``-1.81 [-3.40, -0.22]``, or ``not resolved: +0.28 [-1.20, +1.76]`` where the
    interval covers 0; the seed counts where a side has one seed (unless the caller states
    them, ``seed_counts=False``); :data:`POOLING_MARK` after a verdict that depends on the
    pooling."""
    if d.lo is None:
        return f"{d.delta:{spec}} (no seed variance measured)"
    text = f"{d.delta:{spec}} [{d.lo:{spec}}, {d.hi:{spec}}]"
    if seed_counts and 1 in d.seeds:
        text += f" ({d.seeds[0]} vs {d.seeds[1]} seeds)"
    text = text if d.resolved else f"not resolved: {text}"
    return f"{text} {POOLING_MARK}" if d.depends_on_pooling else text


_STATS: Dict[Tuple[str, int], List[List[int]]] = {}


def hypothesis_stats(path: Path, refs: Sequence[str]) -> List[List[int]]:
    """:func:`sentence_stats` of a committed hypothesis file (cached by path and references)."""
    key = (str(Path(path).resolve()), hash(tuple(refs)))
    if key not in _STATS:
        _STATS[key] = sentence_stats(Path(path).read_text(encoding="utf-8").splitlines(), refs)
    return _STATS[key]


_TEST_VARIANCE: Dict[Tuple, float] = {}


def compare_bleu(base: Sequence[Dict], runs: Sequence[Dict], pooled: Pool, results: str,
                 refs: Sequence[str], pooled_b: Optional[Pool] = None) -> Difference:
    """Two configurations' test BLEU (run records: ``test.bleu``, ``test.hypotheses`` under
    ``results``), counting seeds and test sampling (:func:`compare`; the bootstrap is computed
    once per pair of hypothesis sets, however many pools it is compared under)."""
    paths = tuple(tuple(str(Path(results) / r["test"]["hypotheses"]) for r in side)
                  for side in (base, runs))
    key = (paths, hash(tuple(refs)))
    if key not in _TEST_VARIANCE:
        _TEST_VARIANCE[key] = test_sampling_variance(
            *[[hypothesis_stats(Path(p), refs) for p in side] for side in paths])
    return compare([r["test"]["bleu"] for r in base], [r["test"]["bleu"] for r in runs], pooled,
                   _TEST_VARIANCE[key], pooled_b)


def paired_by_seed(base: List[Dict], runs: List[Dict], results: str, refs: List[str]) -> List[Dict]:
    """Each run against the base run with its seed: the BLEU and chrF deltas and the paired
    bootstrap's p-values (runs without a base of their seed are left out)."""
    by_seed = {b["seed"]: b for b in base}
    out = []
    for r in sorted((r for r in runs if by_seed.get(r["seed"])), key=lambda r: r["seed"]):
        b = by_seed[r["seed"]]
        p = paired_bootstrap(read_lines(Path(results) / b["test"]["hypotheses"]),
                             read_lines(Path(results) / r["test"]["hypotheses"]), refs)
        out.append({"seed": r["seed"], "delta_bleu": r["test"]["bleu"] - b["test"]["bleu"],
                    "delta_chrf": r["test"]["chrf"] - b["test"]["chrf"], **p})
    return out


def fmt_paired(paired: List[Dict]) -> str:
    """``s1: +0.83, p=0.018; s2: ...``: a table cell of :func:`paired_by_seed`."""
    return "; ".join(f"s{p['seed']}: {p['delta_bleu']:+.2f}, p={p['bleu_p']:.3f}" for p in paired)


def load_runs(results: str) -> Dict[str, List[Dict]]:
    """A suite's committed ``RESULTS/runs/*.json``: {configuration: [records sorted by seed]}."""
    runs = defaultdict(list)
    for path in sorted((Path(results) / "runs").glob("*.json")):
        r = read_record(path)
        runs[r["name"]].append(r)
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in runs.items()}


def cost_per_update(run: Dict) -> float:
    """CPU seconds per update where the run recorded them, else wall seconds per update."""
    return run.get("cpu_seconds_per_update") or run["seconds_per_update"]


def lookup_lines(lookup: Optional[Dict], columns: int, bleu_at: int) -> List[str]:
    """A table row for the lookup baseline: BLEU and chrF in columns ``bleu_at`` and the next."""
    if not lookup:
        return []
    cells = ["-"] * columns
    cells[0] = "lookup baseline (no model: closest training verse)"
    cells[bleu_at], cells[bleu_at + 1] = f"{lookup['bleu']:.2f}", f"{lookup['chrf']:.2f}"
    return [markdown_row(cells)]


def plot_curves(runs: Dict[str, List[Dict]], path: Path, metric: str, ylabel: str, title: str,
                wall: str = "training minutes") -> Optional[str]:
    """Each run's valid ``metric`` against updates and against training minutes (CPU where
    every run recorded them: other jobs do not inflate them), seed 1 solid, others dashed."""
    from fairseq_shared.plotting import pyplot

    plt = pyplot()
    if not any(r["curve"] for rs in runs.values() for r in rs):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    cpu = all("train_cpu_seconds" in p for rs in runs.values() for r in rs for p in r["curve"])
    seconds = "train_cpu_seconds" if cpu else "train_seconds"
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, name in enumerate(sorted(runs)):
        for r in runs[name]:
            c = r["curve"]
            style = dict(color=colors[i % len(colors)], linestyle="-" if r["seed"] == 1 else "--",
                         label=f"{name} s{r['seed']}")
            axes[0].plot([p["update"] for p in c], [p[metric] for p in c], **style)
            axes[1].plot([p[seconds] / 60 for p in c], [p[metric] for p in c], **style)
    axes[0].set_xlabel("updates")
    axes[1].set_xlabel("training CPU minutes (1 thread)" if cpu else wall)
    axes[0].set_ylabel(ylabel)
    return save_panels(fig, axes, title, path)


def save_panels(fig, axes, title: Optional[str], path, legend: bool = True, dpi: int = 110) -> str:
    """Legend in the last panel (``legend=False``: the figure has its own), grids, the title
    (if any); write ``path`` and close."""
    import matplotlib.pyplot as plt

    if legend:
        axes[-1].legend(fontsize=7, ncol=2)
    for ax in axes:
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return str(path)
