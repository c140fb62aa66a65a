"""Layer-to-parameter-set assignment: the tables of Takase & Kiyono and their edge cases."""

import pytest

import math

from fairseq_shared.sharing.assignment import (
    SharingConfigError,
    canonical,
    describe,
    format_assignment,
    in_scope,
    layer_assignment,
    restrict,
    valid_set_counts,
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
        # M < N < 2M: the authors' code reverses only the N - M layers after the base block
        ("cycle_rev", 5, 3, "1 2 3 3 2"),
        ("cycle_rev", 3, 2, "1 2 2"),
        ("cycle_rev", 7, 4, "1 2 3 4 4 3 2"),
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


def authors_stack(strategy, N, k):
    """Set of each layer, transcribed from Takase & Kiyono's code: github.com/takase/
    share_layer_params, fairseq/models/transformer.py, TransformerEncoder.__init__ (the
    decoder's loop is the same), flag ``--share-layer-num`` = k, ``--share-type``.
    Layers are appended one by one; a copied layer records the set of the layer it copies."""
    layers = []
    if strategy == "sequence":
        shared_num = 0
        for i in range(N):
            if shared_num == 0:
                base = len(set(layers))  # base_encoder_layer = TransformerEncoderLayer(...)
                layers.append(base)
            else:
                layers.append(base)  # CopyParams(base_encoder_layer, encoder_layer)
            shared_num += 1
            if k != -1 and shared_num == k:
                shared_num = 0
        return layers
    unique_layer_num = -(-N // k)
    for i in range(unique_layer_num):
        layers.append(i)
    if strategy == "cycle":
        for i in range(N - unique_layer_num):
            layers.append(layers[i % unique_layer_num])
    elif strategy == "cycle_rev":  # their 'cycle_reverse'
        for i in range(N - (unique_layer_num * 2)):
            layers.append(layers[i % unique_layer_num])
        base_layers = layers[:unique_layer_num]
        for i in range(N - len(layers)):
            layers.append(base_layers[-((i % unique_layer_num) + 1)])
    return layers


@pytest.mark.parametrize("n", range(1, 25))
@pytest.mark.parametrize("strategy", ["sequence", "cycle", "cycle_rev"])
def test_every_m_the_authors_code_expresses_gives_their_stack(strategy, n):
    """For every N = 1..24 and every k = 1..N: M = ceil(N/k) gives the authors' stack.

    cycle and cycle_rev depend on M only; sequence depends on k, and several k can give the
    same M (N=7: k=4,5,6 all give M=2): the project uses the smallest, k = ceil(N/M)."""
    expressible = set()
    for k in range(1, n + 1):
        m = math.ceil(n / k)
        expressible.add(m)
        if strategy == "sequence" and k != math.ceil(n / m):
            continue
        assert layer_assignment(strategy, n, m) == authors_stack(strategy, n, k), (n, k)
    assert sorted(expressible) == valid_set_counts(n)


@pytest.mark.parametrize("n", range(1, 25))
def test_one_rule_for_m_across_strategies(n):
    """Ms the authors' code cannot express are refused by all three strategies alike."""
    for m in range(1, n + 1):
        for strategy in ("sequence", "cycle", "cycle_rev"):
            if m in valid_set_counts(n):
                a = layer_assignment(strategy, n, m)
                assert sorted(set(a)) == list(range(m))
                if strategy == "sequence":
                    assert a == sorted(a)  # consecutive groups
            else:
                with pytest.raises(SharingConfigError) as err:
                    layer_assignment(strategy, n, m, stack="decoder")
                assert f"allowed values: {valid_set_counts(n)}" in str(err.value)


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
        ("cycle", 6, 4, "cannot be expressed by the cycle strategy for 6 layers"),
        ("cycle_rev", 6, 4, "allowed values: [1, 2, 3, 6]"),
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


def test_describe_names_the_strategy_behind_a_map():
    assert describe([0, 1, 2, 2, 1, 0], "all") == "cycle_rev M=3 (1 2 3 3 2 1), scope=all"
    assert describe([0, 1, 2, 0, 1, 2], "attn") == "cycle M=3 (1 2 3 1 2 3), scope=attn"
    assert describe([0, 0, 1, 1], "ffn") == "sequence M=2 (1 1 2 2), scope=ffn"
    assert describe([0, 1, 2], "all") == "none (no sharing) (1 2 3), scope=all"
    assert describe([0, 0, 0], "all") == "universal (1 1 1), scope=all"
    assert describe([0, 1, 1, 1, 2], "all") == "pattern (1 2 2 2 3), scope=all"


def test_pruning_keeps_each_positions_set():
    full = layer_assignment("cycle_rev", 6, 3)  # 1 2 3 3 2 1
    assert restrict(full, [0, 2, 4]) == canonical([0, 2, 1]) == [0, 1, 2]
    assert restrict(full, [1, 4]) == [0, 0]  # both use set 2: still tied
    assert restrict(full, [5, 0]) == [0, 0]  # sorted, as fairseq's prune_state_dict sorts
    for bad in ([0, 6], [1, 1], []):
        with pytest.raises(SharingConfigError, match="--decoder-layers-to-keep"):
            restrict(full, bad, stack="decoder")
