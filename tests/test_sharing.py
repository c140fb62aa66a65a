"""Layer-to-parameter-set assignment: the tables of Takase & Kiyono and their edge cases."""

import pytest

from fairseq_shared.sharing import (
    SharingConfigError,
    format_assignment,
    in_scope,
    layer_assignment,
    valid_sequence_set_counts,
)


@pytest.mark.parametrize(
    "strategy,n,m,expected",
    [
        ("sequence", 6, 3, "1 1 2 2 3 3"),
        ("cycle", 6, 3, "1 2 3 1 2 3"),
        ("cycle_rev", 6, 3, "1 2 3 3 2 1"),
        ("sequence", 12, 6, "1 1 2 2 3 3 4 4 5 5 6 6"),
        ("cycle", 12, 6, "1 2 3 4 5 6 1 2 3 4 5 6"),
        ("cycle_rev", 12, 6, "1 2 3 4 5 6 6 5 4 3 2 1"),
        ("cycle_rev", 18, 6, "1 2 3 4 5 6 1 2 3 4 5 6 6 5 4 3 2 1"),
        # N not a multiple of M: the authors' code (k = 3 layers per set -> M = 4)
        ("cycle_rev", 10, 4, "1 2 3 4 1 2 4 3 2 1"),
        ("sequence", 10, 4, "1 1 1 2 2 2 3 3 3 4"),
        ("cycle", 10, 4, "1 2 3 4 1 2 3 4 1 2"),
        ("universal", 5, None, "1 1 1 1 1"),
        ("universal", 5, 1, "1 1 1 1 1"),
        ("none", 4, None, "1 2 3 4"),
        ("none", 4, 4, "1 2 3 4"),
        ("sequence", 4, 4, "1 2 3 4"),  # M = N is vanilla
        ("cycle", 4, 1, "1 1 1 1"),  # M = 1 is universal
        ("1,2,3,3,2,1", 6, None, "1 2 3 3 2 1"),  # sandwich
        ("1,1,2,2", 4, 2, "1 1 2 2"),  # immediate repeats
        ("2,1,2", 3, None, "2 1 2"),
    ],
)
def test_assignment_tables(strategy, n, m, expected):
    assert format_assignment(layer_assignment(strategy, n, m)) == expected


@pytest.mark.parametrize("n", range(1, 20))
def test_every_strategy_uses_exactly_m_sets(n):
    for m in range(1, n + 1):
        for strategy in ("cycle", "cycle_rev"):
            assert sorted(set(layer_assignment(strategy, n, m))) == list(range(m))
    for m in valid_sequence_set_counts(n):
        a = layer_assignment("sequence", n, m)
        assert sorted(set(a)) == list(range(m))
        assert a == sorted(a)  # consecutive groups


@pytest.mark.parametrize(
    "strategy,n,m,needle",
    [
        ("cycle", 6, 0, "--decoder-unique-layers must satisfy 1 <= M <= decoder layers (6); got 0"),
        ("cycle", 6, 7, "got 7"),
        ("cycle", 6, None, "needs --decoder-unique-layers"),
        ("zigzag", 6, 3, "unknown strategy 'zigzag'; allowed: none, sequence, cycle, cycle_rev, universal"),
        ("1,2,3", 4, None, "has 3 entries but the stack has 4 layers"),
        ("1,3,3,1", 4, None, "no gaps"),
        ("0,1,1,0", 4, None, "no gaps"),
        ("1,x,2,1", 4, None, "not a valid value"),
        ("1,2,2,1", 4, 3, "contradicts"),
        ("universal", 4, 2, "exactly 1 set"),
        ("none", 4, 2, "needs a sharing strategy"),
        ("sequence", 10, 6, "allowed values: [1, 2, 3, 4, 5, 10]"),
    ],
)
def test_invalid_settings_name_flag_and_allowed_values(strategy, n, m, needle):
    with pytest.raises(SharingConfigError) as err:
        layer_assignment(strategy, n, m, stack="decoder")
    assert needle in str(err.value)
    assert "--decoder-" in str(err.value)


def test_scopes():
    assert in_scope("self_attn.q_proj.weight", "attn")
    assert in_scope("encoder_attn.out_proj.bias", "attn")
    assert not in_scope("self_attn_layer_norm.weight", "attn")
    assert not in_scope("fc1.weight", "attn")
    assert in_scope("fc2.bias", "ffn") and not in_scope("self_attn.k_proj.weight", "ffn")
    assert all(in_scope(n, "all") for n in ("fc1.weight", "final_layer_norm.bias"))
