"""Learning a sharing pattern from layer similarity (issue 12, part 3): CKA, the exact
contiguous partition, clustering, thresholds, and the command on constructed models."""

import itertools
import json

import pytest
import torch

from fairseq_shared.tools import layer_similarity as ls
from fairseq_shared.cli.learn_sharing import main
from fairseq_shared.tools.learn_sharing import collect_outputs, layer_vectors
from helpers_checkpoint import build_for_data, save_checkpoint
from helpers_data import data_bin
from helpers_model import random_batch

torch.set_num_threads(1)


# ---- linear CKA -----------------------------------------------------------------------------


def _orthogonal(d, seed):
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed),
                                       dtype=torch.float64))
    return q


def test_cka_is_one_on_identical_inputs_and_symmetric():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(50, 8, generator=g), torch.randn(50, 5, generator=g)
    assert ls.linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    assert ls.linear_cka(x, y) == pytest.approx(ls.linear_cka(y, x), abs=1e-12)
    assert 0.0 <= ls.linear_cka(x, y) < 0.5  # independent noise: far from 1


def test_cka_is_invariant_to_isotropic_scaling_orthogonal_transforms_and_shifts():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 6, generator=g, dtype=torch.float64)
    y = x @ torch.randn(6, 6, generator=g, dtype=torch.float64) + 0.3 * torch.randn(
        40, 6, generator=g, dtype=torch.float64)
    base = ls.linear_cka(x, y)
    q = _orthogonal(6, 2)
    assert ls.linear_cka(3.7 * x, y) == pytest.approx(base, abs=1e-12)
    assert ls.linear_cka(x @ q, 0.01 * y @ _orthogonal(6, 3)) == pytest.approx(base, abs=1e-12)
    assert ls.linear_cka(x + 5.0, y - 2.0) == pytest.approx(base, abs=1e-12)  # centered
    assert ls.linear_cka(x, x @ q) == pytest.approx(1.0, abs=1e-12)
    # not invariant to an arbitrary invertible linear map (what makes it a useful measure)
    stretch = torch.diag(torch.tensor([10.0, 1, 1, 1, 1, 0.1], dtype=torch.float64))
    assert abs(ls.linear_cka(x, x @ stretch) - 1.0) > 0.05


@pytest.mark.parametrize("n", [5, 60], ids=["gram-space", "feature-space"])
def test_cka_matrix_equals_pairwise_cka_in_either_space(n):
    g = torch.Generator().manual_seed(n)
    feats = [torch.randn(n, 8, generator=g) for _ in range(3)]
    feats.append(feats[0] @ _orthogonal(8, 4).float() * 2)  # same as layer 1
    m = ls.cka_matrix(feats)
    for i, j in itertools.product(range(4), repeat=2):
        assert float(m[i, j]) == pytest.approx(ls.linear_cka(feats[i], feats[j]), abs=1e-9)
    assert float(m[0, 3]) == pytest.approx(1.0, abs=1e-9)


# ---- groupings ------------------------------------------------------------------------------


def _random_similarity(n, seed):
    g = torch.Generator().manual_seed(seed)
    return ls.cosine_matrix([torch.randn(4, generator=g).abs() for _ in range(n)])


def _contiguous_partitions(n, m):
    for cuts in itertools.combinations(range(1, n), m - 1):
        bounds = (0, *cuts, n)
        yield [g for g in range(m) for _ in range(bounds[g + 1] - bounds[g])]


@pytest.mark.parametrize("n", range(1, 8))
def test_adjacent_partition_is_the_brute_force_optimum(n):
    for seed in range(3):
        sim = _random_similarity(n, 10 * n + seed)
        for m in range(1, n + 1):
            found = ls.adjacent_partition(sim, m)
            assert found in list(_contiguous_partitions(n, m))
            best = max(ls.partition_score(sim, p) for p in _contiguous_partitions(n, m))
            assert ls.partition_score(sim, found) == pytest.approx(best, abs=1e-12)


def test_partition_score_is_n_minus_the_scatter_around_group_means():
    g = torch.Generator().manual_seed(5)
    vecs = [v / v.norm() for v in torch.randn(5, 3, generator=g, dtype=torch.float64)]
    sim = ls.cosine_matrix(vecs)
    pattern = [0, 0, 1, 1, 1]
    means = [torch.stack([v for v, p in zip(vecs, pattern) if p == pattern[i]]).mean(0)
             for i in range(5)]
    scatter = sum(float((vecs[i] - means[i]).pow(2).sum()) for i in range(5))
    assert ls.partition_score(sim, pattern) == pytest.approx(5 - scatter, abs=1e-12)


def _blocks(pattern, inside=0.95, outside=0.2):
    n = len(pattern)
    return torch.tensor([[1.0 if i == j else inside if pattern[i] == pattern[j] else outside
                          for j in range(n)] for i in range(n)], dtype=torch.float64)


def test_clustering_finds_non_adjacent_sets_numbered_by_first_appearance():
    sim = _blocks([2, 0, 2, 1, 0, 1])
    assert ls.average_linkage(sim, 3) == [0, 1, 0, 2, 1, 2]
    assert ls.threshold_linkage(sim, 0.9) == [0, 1, 0, 2, 1, 2]
    assert ls.threshold_linkage(sim, 0.1) == [0] * 6
    assert ls.average_linkage(sim, 6) == list(range(6))
    # the adjacent DP can only use runs: every layer alone is its best with M = 6
    assert ls.adjacent_partition(sim, 6) == list(range(6))


def test_threshold_adjacent_needs_every_pair_in_a_group_above_t():
    # 1~2 and 2~3 are >= 0.9 but 1~3 is not: a chain rule would join all three
    sim = torch.tensor([[1, 0.95, 0.8], [0.95, 1, 0.95], [0.8, 0.95, 1]], dtype=torch.float64)
    assert ls.threshold_adjacent(sim, 0.9) == [0, 0, 1]
    assert ls.threshold_adjacent(sim, 0.7) == [0, 0, 0]
    assert ls.threshold_adjacent(sim, 0.99) == [0, 1, 2]
    assert ls.pattern_flag([0, 0, 1]) == "1,1,2"


def test_bad_numbers_of_sets_are_refused():
    with pytest.raises(ValueError, match="1 <= M <= 3"):
        ls.adjacent_partition(torch.eye(3), 4)


# ---- on models ---------------------------------------------------------------------------

SIX = ["--encoder-layers", "6", "--decoder-layers", "6"]
PRE_LN = ["--encoder-normalize-before", "--decoder-normalize-before"]


def identity_after_each_computing_layer(model):
    """Layers 2, 4, 6 of each stack become the identity and layers 1, 3, 5 change the
    representation a lot (their branches scaled by 1, 10, 100, so that each outweighs the
    stream it adds to), so the outputs come in three runs of two *equal* representations.

    Why this tests CKA: a pre-LN layer computes x + attention(LN(x)) [+ cross-attention]
    + FFN(LN(x)); with the output projections and fc2 zero every branch is 0 and the layer
    returns its input, so its output equals the output of the layer below (CKA exactly 1,
    the identical-inputs property), while a layer with large random branches mixes its input
    (CKA well below 1). A correct CKA must therefore find 1 1 2 2 3 3, adjacent and
    clustered. The weights say nothing of this: an identity layer's weights are not a copy
    of the layer below, and the test checks that their cosine is low.
    """
    with torch.no_grad():
        for stack in (model.encoder, model.decoder):
            for i, layer in enumerate(stack.layers):
                branches = [layer.self_attn.out_proj, layer.fc2]
                if getattr(layer, "encoder_attn", None) is not None:
                    branches.append(layer.encoder_attn.out_proj)
                for linear in branches:
                    if i % 2 == 1:
                        linear.weight.zero_()
                        linear.bias.zero_()
                    else:  # 1, 10, 100: each dominates the residual stream it adds to
                        linear.weight.mul_(10.0 ** (i // 2))
    return model


def copies_in_pattern(model, pattern):
    """Every layer of each stack a copy of the first layer with its set id in ``pattern``."""
    with torch.no_grad():
        for stack in (model.encoder, model.decoder):
            first = {}
            for i, s in enumerate(pattern):
                first.setdefault(s, i)
                stack.layers[i].load_state_dict(stack.layers[first[s]].state_dict())
    return model


def test_collect_outputs_keeps_every_non_pad_token_once(tmp_path_factory):
    _, task, model = build_for_data(data_bin(tmp_path_factory), "shared_transformer", SIX)
    src, lengths, prev = random_batch(task, bsz=4, src_len=9, tgt_len=7)
    pad = task.target_dictionary.pad()
    out = collect_outputs(model.eval(), [{"src_tokens": src, "src_lengths": lengths,
                                          "prev_output_tokens": prev}], pad)
    assert [tuple(x.shape) for x in out["encoder"]] == [(int(src.ne(pad).sum()), 16)] * 6
    assert [tuple(x.shape) for x in out["decoder"]] == [(int(prev.ne(pad).sum()), 16)] * 6


def test_layer_updates_add_up_to_the_last_layer_output(tmp_path_factory):
    """cka_update compares what each layer adds: output minus input, so the embeddings'
    output plus every layer's update is the last layer's output, token by token."""
    _, task, model = build_for_data(data_bin(tmp_path_factory), "shared_transformer",
                                    SIX + PRE_LN, seed=5)
    src, lengths, prev = random_batch(task, bsz=4, src_len=9, tgt_len=7, seed=6)
    pad = task.target_dictionary.pad()
    batch = [{"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}]
    outputs = collect_outputs(model.eval(), batch, pad)
    updates = collect_outputs(model, batch, pad, updates=True)
    for stack in ("encoder", "decoder"):
        first_input = outputs[stack][0] - updates[stack][0]
        total = first_input + sum(updates[stack])
        assert torch.allclose(total, outputs[stack][-1], atol=1e-5)
        for i in range(1, 6):  # each update is the difference of consecutive outputs
            assert torch.allclose(updates[stack][i], outputs[stack][i] - outputs[stack][i - 1],
                                  atol=1e-5)
        assert not torch.allclose(updates[stack][1], outputs[stack][1])


def test_cka_recovers_layers_that_repeat_the_representation_below(tmp_path_factory):
    data = data_bin(tmp_path_factory)
    _, task, model = build_for_data(data, "shared_transformer", SIX + PRE_LN, seed=3)
    identity_after_each_computing_layer(model.eval())
    src, lengths, prev = random_batch(task, bsz=8, src_len=12, tgt_len=10, seed=4)
    pad = task.target_dictionary.pad()
    outputs = collect_outputs(model, [{"src_tokens": src, "src_lengths": lengths,
                                       "prev_output_tokens": prev}], pad)
    for stack in ("encoder", "decoder"):
        cka = ls.cka_matrix(outputs[stack])
        for a, b in ((0, 1), (2, 3), (4, 5)):
            assert float(cka[a, b]) == pytest.approx(1.0, abs=1e-9)
        assert float(cka[1, 2]) < 0.8 and float(cka[3, 4]) < 0.8
        assert ls.adjacent_partition(cka, 3) == [0, 0, 1, 1, 2, 2]
        assert ls.average_linkage(cka, 3) == [0, 0, 1, 1, 2, 2]
        cosine = ls.cosine_matrix(layer_vectors(model, stack))
        assert float(cosine[0, 1]) < 0.5  # the weights do not show it


def test_command_learns_the_constructed_patterns_end_to_end(tmp_path, tmp_path_factory):
    data = data_bin(tmp_path_factory)
    args, _, model = build_for_data(data, "shared_transformer", SIX + PRE_LN, seed=3)
    identity_after_each_computing_layer(model)
    path = save_checkpoint(tmp_path / "identity.pt", args, model)
    out = tmp_path / "cka"
    main([str(path), "--data", str(data), "--sets", "3", "--out-dir", str(out)])
    record = json.loads((out / "sharing.json").read_text())
    expected = "--encoder-share-strategy 1,1,2,2,3,3 --decoder-share-strategy 1,1,2,2,3,3"
    assert record["flags"] == expected
    assert (out / "sharing.txt").read_text().strip() == expected
    assert (out / "similarity.png").stat().st_size > 0
    assert record["stacks"]["encoder"]["tokens"] > 16  # the valid split's tokens
    assert record["stacks"]["decoder"]["patterns"]["clustered"] == "1,1,2,2,3,3"

    # weights: copies in a non-adjacent pattern in fairseq's own transformer, found by
    # clustering (no held-out data read)
    args, _, model = build_for_data(data, "transformer", SIX, seed=5)
    copies_in_pattern(model, [0, 1, 0, 2, 1, 2])
    path = save_checkpoint(tmp_path / "copies.pt", args, model)
    out = tmp_path / "weights"
    main([str(path), "--measure", "weights", "--grouping", "clustered", "--threshold", "0.999",
          "--out-dir", str(out)])
    record = json.loads((out / "sharing.json").read_text())
    assert record["flags"] == ("--encoder-share-strategy 1,2,1,3,2,3 "
                               "--decoder-share-strategy 1,2,1,3,2,3")
    assert record["stacks"]["encoder"]["patterns"]["adjacent"] == "1,2,3,4,5,6"


def test_command_refuses_bad_settings_naming_the_flag(tmp_path, tmp_path_factory, capsys):
    data = data_bin(tmp_path_factory)
    args, _, model = build_for_data(data, "shared_transformer", SIX)
    path = save_checkpoint(tmp_path / "m.pt", args, model)
    with pytest.raises(SystemExit):
        main([str(path), "--measure", "weights", "--sets", "7", "--out-dir", str(tmp_path)])
    assert "--sets 7: the encoder has 6 layers; allowed: 1 to 6" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(path), "--sets", "2", "--threshold", "0.9"])
