"""SAN policy maths on hand-built attention maps: JS similarity, block similarity, grouping."""

import math

import pytest
import torch

from fairseq_shared.san.policy import (
    PolicyError,
    block_similarity,
    format_policy,
    group_layers,
    js_divergence,
    leaders,
    paper_cross_policy,
    paper_self_policy,
    pairwise_js_sums,
    parse_policy,
    similarity_matrix,
)


def t(x):
    return torch.as_tensor(x, dtype=torch.float64)


# ---- Jensen-Shannon ------------------------------------------------------------------


def test_js_of_identical_distributions_is_zero():
    p = t([0.2, 0.3, 0.5])
    assert float(js_divergence(p, p)) == pytest.approx(0.0, abs=1e-12)


def test_js_of_disjoint_distributions_is_one_bit():
    assert float(js_divergence(t([1.0, 0.0]), t([0.0, 1.0]))) == pytest.approx(1.0)
    assert float(js_divergence(t([0.5, 0.5, 0, 0]), t([0, 0, 0.3, 0.7]))) == pytest.approx(1.0)


def test_js_matches_hand_computation():
    p, q = t([1.0, 0.0]), t([0.5, 0.5])
    m = [0.75, 0.25]
    kl_pm = 1.0 * math.log2(1.0 / m[0])
    kl_qm = 0.5 * math.log2(0.5 / m[0]) + 0.5 * math.log2(0.5 / m[1])
    expected = 0.5 * kl_pm + 0.5 * kl_qm  # ~0.3113
    assert float(js_divergence(p, q)) == pytest.approx(expected, rel=1e-12)
    assert float(js_divergence(q, p)) == pytest.approx(expected, rel=1e-12)  # symmetric


def test_js_is_per_row():
    p = t([[1.0, 0.0], [0.5, 0.5]])
    q = t([[0.0, 1.0], [0.5, 0.5]])
    torch.testing.assert_close(js_divergence(p, q), t([1.0, 0.0]))


def test_similarity_matrix_and_masking():
    # 3 layers, 2 query positions, 2 keys. Layers 0 and 1 agree; layer 2 is disjoint
    # from them at position 0 and identical at position 1.
    a = [[1.0, 0.0], [0.5, 0.5]]
    c = [[0.0, 1.0], [0.5, 0.5]]
    dists = t([a, a, c])
    mu = similarity_matrix(dists)
    torch.testing.assert_close(mu, t([[1, 1, 0.5], [1, 1, 0.5], [0.5, 0.5, 1]]))
    # counting only position 1 makes every pair identical
    mu1 = similarity_matrix(dists, weights=t([0.0, 1.0]))
    torch.testing.assert_close(mu1, torch.ones(3, 3, dtype=torch.float64))
    sums, count = pairwise_js_sums(dists)
    assert float(count) == 2 and float(sums[0, 2]) == pytest.approx(1.0)


# ---- block similarity and grouping ---------------------------------------------------


def mu_from_js(js):
    js = t(js)
    return 1.0 - (js + js.T)


def paper_self_js():
    """The paper's self-attention JS pattern: layer 1 far from all (~0.5), 2-6 close."""
    js = torch.zeros(6, 6, dtype=torch.float64)
    for j in range(1, 6):
        js[0, j] = 0.47 + 0.02 * (j - 1)
    for i in range(1, 6):
        for j in range(i + 1, 6):
            js[i, j] = 0.02 + 0.01 * (j - i)
    return js


def paper_cross_js():
    js = torch.full((6, 6), 0.3, dtype=torch.float64).triu(1)
    # the paper reports (3,4) as 0.10 (rounded); exactly 0.10 would give mu = theta,
    # which the strict '>' rejects (see test_threshold_is_strict_ties_do_not_group)
    js[0, 1], js[2, 3], js[4, 5] = 0.02, 0.099, 0.07
    return js


def test_paper_patterns_give_the_paper_policies():
    assert group_layers(mu_from_js(paper_self_js()), 0.9) == [1, 5]
    assert group_layers(mu_from_js(paper_cross_js()), 0.9) == [2, 2, 2]
    assert paper_self_policy(6) == [1, 5] and paper_cross_policy(6) == [2, 2, 2]


def test_block_similarity_is_mean_over_distinct_pairs():
    mu = mu_from_js([[0, 0.1, 0.3], [0, 0, 0.2], [0, 0, 0]])
    assert block_similarity(mu, 0, 2) == pytest.approx(1 - (0.1 + 0.3 + 0.2) / 3)
    assert block_similarity(mu, 1, 2) == pytest.approx(0.8)
    assert block_similarity(mu, 1, 1) == 1.0  # one-layer block


def test_largest_block_first_not_first_acceptable():
    # pairs (0,1) and (1,2) are very similar but (0,2) is not: block {0,1,2} has mean
    # mu = (0.99 + 0.99 + 0.5)/3 = 0.827. At theta 0.8 the whole block wins; at 0.9 the
    # largest acceptable block from layer 0 is {0,1}, then {2}.
    mu = mu_from_js([[0, 0.01, 0.5], [0, 0, 0.01], [0, 0, 0]])
    assert group_layers(mu, 0.8) == [3]
    assert group_layers(mu, 0.9) == [2, 1]


def test_block_similarity_need_not_be_monotone():
    # {0,1} is dissimilar but {0,1,2,3} is similar on average: largest-first takes it.
    js = torch.full((4, 4), 0.0, dtype=torch.float64).triu(1)
    js[0, 1] = 0.5
    mu = mu_from_js(js)
    assert block_similarity(mu, 0, 1) == pytest.approx(0.5)
    assert block_similarity(mu, 0, 3) == pytest.approx(1 - 0.5 / 6)
    assert group_layers(mu, 0.9) == [4]


def test_threshold_is_strict_ties_do_not_group():
    mu = mu_from_js([[0, 0.1], [0, 0]])  # mu(0,1) = 0.9 exactly
    assert group_layers(mu, 0.9) == [1, 1]
    assert group_layers(mu, 0.9 - 1e-9) == [2]


def test_identical_layers_tie_at_one():
    mu = torch.ones(5, 5, dtype=torch.float64)
    assert group_layers(mu, 0.999) == [5]
    assert group_layers(mu, 1.0) == [1, 1, 1, 1, 1]


def test_thresholds_at_the_extremes():
    mu = mu_from_js(paper_cross_js())
    assert group_layers(mu, 1.0) == [1] * 6  # nothing beats 1
    assert group_layers(mu, -1e-9) == [6]  # everything beats < 0
    disjoint = torch.eye(4, dtype=torch.float64)  # mu = 0 off the diagonal
    assert group_layers(disjoint, 0.0) == [1, 1, 1, 1]  # 0 > 0 is false
    assert group_layers(disjoint, -0.1) == [4]


def test_single_layer_stack():
    assert group_layers(torch.ones(1, 1), 0.5) == [1]


def test_grouping_continues_after_each_block():
    # blocks {0}, {1,2}, {3}, {4,5}
    js = torch.full((6, 6), 0.4, dtype=torch.float64).triu(1)
    js[1, 2] = js[4, 5] = 0.01
    assert group_layers(mu_from_js(js), 0.9) == [1, 2, 1, 2]


def test_grouping_from_recorded_distributions_end_to_end():
    g = torch.Generator().manual_seed(0)
    base = torch.softmax(torch.randn(2, 3, 5, generator=g), -1)  # heads x queries x keys
    other = torch.softmax(torch.randn(2, 3, 5, generator=g) * 4, -1)
    dists = torch.stack([other, base, base, base]).double()
    mu = similarity_matrix(dists)
    assert mu[1, 2] == pytest.approx(1.0) and mu[0, 1] < 0.95
    assert group_layers(mu, 0.95) == [1, 3]


# ---- policy parsing ---------------------------------------------------------------------


def test_parse_and_format():
    assert parse_policy("1,5", 6, "--san-self-policy") == [1, 5]
    assert parse_policy("2, 2, 2", 6) == [2, 2, 2]
    assert parse_policy([3, 3], 6) == [3, 3]
    assert format_policy([1, 5]) == "1,5"


@pytest.mark.parametrize(
    "text,needle",
    [
        ("1,4", "sum to 5"),
        ("0,6", ">= 1"),
        ("-1,7", ">= 1"),
        ("a,b", "not a list of integers"),
        ("", "empty"),
    ],
)
def test_parse_errors_name_the_flag_and_allowed_values(text, needle):
    with pytest.raises(PolicyError) as e:
        parse_policy(text, 6, "--san-self-policy")
    msg = str(e.value)
    assert msg.startswith("--san-self-policy") and needle in msg
    assert "allowed" in msg and "sum to 6" in msg


def test_leaders_point_at_the_first_layer_of_each_block():
    assert leaders([1, 2, 3]) == [0, 1, 1, 3, 3, 3]
    for blocks in ([1, 5], [2, 2, 2], [6], [1] * 6, [3, 1, 2]):
        lead = leaders(blocks)
        firsts = [sum(blocks[:b]) for b in range(len(blocks))]
        assert sorted(set(lead)) == firsts and all(lead[i] <= i for i in range(len(lead)))
