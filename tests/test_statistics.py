"""The report statistics on synthetic scores: seed noise larger than a gap leaves it "not
resolved", a large consistent gap is resolved, and the test-sampling term is the variance of a
paired sentence bootstrap of sacreBLEU's own corpus score."""

import random
import statistics as stats

import pytest

from harness import statistics as st


def test_seed_summary_is_a_t_interval_over_seeds():
    s = st.seed_summary([29.73, 30.83])
    assert s.mean == pytest.approx(30.28) and s.sd == pytest.approx(0.7778, abs=1e-4)
    # t(1) = 12.706: two seeds say little about a configuration's mean
    assert s.hi - s.mean == pytest.approx(12.706 * 0.7778 / 2 ** 0.5, rel=1e-3)
    one = st.seed_summary([31.02])
    assert one.sd is None and one.lo is None
    assert st.fmt_seeds([31.02]) == "31.02 (one seed)"
    assert st.fmt_seeds([29.73, 30.83]).startswith("30.28 ± 0.78 [")


def test_pooled_sd_counts_every_group_with_two_seeds():
    sd, df = st.pooled_sd([[1.0, 3.0], [10.0, 10.0, 13.0], [7.0]])
    assert df == 1 + 2
    assert sd == pytest.approx(((2 + 6) / 3) ** 0.5)
    assert st.pooled_sd([[1.0], [2.0]]) == (None, 0)


def test_seed_noise_larger_than_the_gap_is_not_resolved():
    rng = random.Random(0)
    a = [30 + rng.gauss(0, 1.0) for _ in range(3)]
    b = [30.4 + rng.gauss(0, 1.0) for _ in range(3)]
    d = st.compare(a, b, st.pooled_sd([a, b]))
    assert d.lo < 0 < d.hi and d.resolved is False
    assert st.fmt_difference(d).startswith("not resolved: ")


def test_a_large_consistent_gap_is_resolved_and_signed():
    a, b = [30.1, 29.9, 30.0], [27.0, 27.2, 26.9]
    d = st.compare(a, b, st.pooled_sd([a, b]))
    assert d.delta == pytest.approx(stats.mean(b) - stats.mean(a))
    assert d.hi < 0 and d.resolved is True
    assert st.fmt_difference(d) == "-2.97 [-3.26, -2.67]"


def test_test_sampling_variance_widens_the_interval():
    a, b = [30.0, 30.2], [29.0, 29.1]
    pooled = st.pooled_sd([a, b])
    narrow, wide = st.compare(a, b, pooled), st.compare(a, b, pooled, test_variance=1.0)
    assert wide.lo < narrow.lo and wide.hi > narrow.hi and wide.delta == narrow.delta
    # one seed on each side and no pooled variance: nothing to count, no verdict
    lone = st.compare([30.0], [29.0], (None, 0))
    assert lone.resolved is None and "no seed variance" in st.fmt_difference(lone)


def test_sentence_bootstrap_of_sacrebleus_statistics():
    from sacrebleu.metrics import BLEU

    rng = random.Random(1)
    words = "the of and to in that he shall unto for".split()
    refs = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(60)]
    noisy = lambda p: [" ".join(w if rng.random() > p else rng.choice(words)  # noqa: E731
                                for w in r.split()) for r in refs]
    good, bad = noisy(0.2), noisy(0.5)
    stats_good, stats_bad = st.sentence_stats(good, refs), st.sentence_stats(bad, refs)
    # the statistics add up to sacreBLEU's corpus score
    total = [sum(col) for col in zip(*stats_good)]
    assert BLEU()._compute_score_from_stats(total).score == pytest.approx(
        BLEU().corpus_score(good, [refs]).score)
    assert st.test_sampling_variance([stats_good], [stats_good], samples=50) == 0.0
    var = st.test_sampling_variance([stats_good], [stats_bad], samples=200)
    assert 0.1 < var < 100
    with pytest.raises(ValueError):
        st.sentence_stats(good[:-1], refs)


def test_a_difference_across_two_pools_carries_each_sides_variance_with_welch_df():
    raw, distilled = (0.6, 11), (0.2, 3)
    a, b = [30.0, 31.0, 29.0], [28.0, 28.4]
    d = st.compare(a, b, raw, pooled_b=distilled)
    var_a, var_b = 0.6 ** 2 / 3, 0.2 ** 2 / 2
    df = (var_a + var_b) ** 2 / (var_a ** 2 / 11 + var_b ** 2 / 3)
    assert d.hi - d.delta == pytest.approx(st.t_quantile(df) * (var_a + var_b) ** 0.5)
    # one pool: the plain pooled t interval, as before
    same = st.compare(a, b, raw)
    assert same.hi - same.delta == pytest.approx(st.t_quantile(11) * 0.6 * (1 / 3 + 1 / 2) ** 0.5)


def synthetic_finals(groups):
    """{configuration: {seed: final record}} of synthetic BLEU and valid-loss scores."""
    return {name: {seed: {"test": {"bleu": bleu}, "average_valid_loss": bleu / 10,
                          "training_data": data, "label": name, "N": 3, "decoder_N": 3,
                          "pair": None}
                   for seed, bleu in enumerate(scores, 1)}
            for name, (data, scores) in groups.items()}


def test_a_low_variance_group_does_not_shrink_another_groups_interval():
    from harness.budget_findings import _pooled

    raw = {"vanilla": ("raw", [30.0, 31.2, 29.1]), "shared": ("raw", [29.0, 30.5, 28.2])}
    students = {"student": ("distilled", [30.00, 30.02]), "student2": ("distilled", [28.0, 28.01])}
    _, _, alone = _pooled(synthetic_finals(raw))
    _, _, beside = _pooled(synthetic_finals({**raw, **students}))
    assert beside.of("bleu", "shared") == alone.of("bleu", "shared")
    assert beside.of("valid_loss", "vanilla") == alone.of("valid_loss", "vanilla")
    # pooled over every row, as before, the students' spread would have narrowed it
    assert beside.every_row["bleu"][0] < alone.of("bleu", "shared")[0] * 0.85
    wide = st.compare([30.0, 31.2, 29.1], [29.0, 30.5, 28.2], beside.of("bleu", "shared"))
    narrow = st.compare([30.0, 31.2, 29.1], [29.0, 30.5, 28.2], beside.every_row["bleu"])
    assert wide.hi - wide.lo > narrow.hi - narrow.lo


def test_a_verdict_that_another_pooling_turns_is_marked():
    from harness.budget_findings import _pooled, pooled_comparison

    finals = synthetic_finals({"vanilla": ("raw", [30.0, 31.4, 28.6]),
                               "deeper": ("raw", [32.8, 34.0]),
                               "student": ("distilled", [30.0, 30.02]),
                               "student2": ("distilled", [25.0, 25.01])})
    _, _, pools = _pooled(finals)
    bleu = {n: [r["test"]["bleu"] for r in by_seed.values()] for n, by_seed in finals.items()}

    def verdict(a, b):
        return pooled_comparison("bleu", a, b, pools, lambda pa, pb: st.compare(
            bleu[a], bleu[b], pa, pooled_b=pb))

    d = verdict("vanilla", "deeper")  # resolved only with the students' spread pooled in
    assert not d.resolved and d.depends_on_pooling
    assert st.fmt_difference(d).endswith(st.POOLING_MARK)
    assert st.compare(bleu["vanilla"], bleu["deeper"], pools.every_row["bleu"]).resolved
    far = verdict("student2", "vanilla")  # resolved whichever way it is pooled
    assert far.resolved and not far.depends_on_pooling
    assert not st.fmt_difference(far).endswith(st.POOLING_MARK)


def test_seeds_to_resolve_is_the_fewest_a_side_whose_interval_excludes_the_gap():
    """One pool (sd 0.6, 11 degrees of freedom), 3 vs 1 seeds, a gap of +1.0: not resolved as
    it stands; with n seeds a side (the pool gaining the added seeds' degrees of freedom) the
    interval first excludes 0 at the count returned, and not one seed earlier."""
    d = st.compare([30.0, 30.5, 29.5], [31.0], (0.6, 11))
    assert not d.resolved
    n = st.seeds_to_resolve(d)
    half = lambda k: st.t_quantile(11 + (k - 3) + (k - 1)) * 0.6 * (2 / k) ** 0.5  # noqa: E731
    assert n == 4 and half(n) < 1.0 <= half(n - 1)
    assert st.fmt_seeds_to_resolve(d) == "4 seeds a side would resolve it"
    # test sampling the seeds cannot shrink: a gap inside it is never resolved by seeds
    covered = st.compare([30.0, 30.5, 29.5], [31.0], (0.6, 11), test_variance=0.5)
    assert st.seeds_to_resolve(covered) is None
    assert st.fmt_seeds_to_resolve(covered) == f"{st.MOST_SEEDS} seeds a side would not resolve it"
    # resolved already, or no seed variance: nothing to say
    resolved = st.compare([30.0, 30.5, 29.5], [33.0], (0.6, 11))
    assert st.seeds_to_resolve(resolved) == 0 and st.fmt_seeds_to_resolve(resolved) == ""
    assert st.seeds_to_resolve(st.compare([30.0], [31.0], (None, 0))) is None
    # two pools: each side's own sd and degrees of freedom, Welch's df as compare() has it
    two = st.compare([30.0, 30.5, 29.5], [30.6, 30.4], (0.6, 11), pooled_b=(0.2, 3))
    k = st.seeds_to_resolve(two)
    welch = lambda k: (lambda va, vb: st.t_quantile((va + vb) ** 2 / (  # noqa: E731
        va ** 2 / (11 + k - 3) + vb ** 2 / (3 + k - 2))) * (va + vb) ** 0.5)(0.36 / k, 0.04 / k)
    assert welch(k) < abs(two.delta) <= welch(k - 1)
