"""Converting a trained model into a shared one (issue 12, part 2): the arithmetic, the
conversion of models and checkpoints, and the result in fairseq's tools."""

import pytest
import torch

from fairseq_shared.cli.convert_sharing import main
from fairseq_shared.tools.convert_sharing import (
    convert_checkpoint,
    convert_model,
    lora_factors,
    relative_residual,
    set_means,
)
from helpers_checkpoint import build_for_data, save_checkpoint
from helpers_data import USER_DIR, data_bin, run_tool
from helpers_model import TINY, random_batch

torch.set_num_threads(1)

FOUR = ["--encoder-layers", "4", "--decoder-layers", "4"]


# ---- the arithmetic ---------------------------------------------------------------------------


def test_set_means_average_the_positions_of_each_set():
    w = [torch.full((2, 3), float(i)) for i in range(4)]
    means = set_means(w, [0, 1, 1, 0])
    assert torch.equal(means[0], torch.full((2, 3), 1.5))  # positions 1 and 4
    assert torch.equal(means[1], torch.full((2, 3), 1.5))  # positions 2 and 3
    assert relative_residual({"w": w[3]}, {"w": means[0]}) == pytest.approx(0.5)
    assert relative_residual({"w": w[3]}, {"w": w[3]}) == 0.0


def _matrix(out, inp, seed):
    return torch.randn(out, inp, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6)])
def test_lora_factors_are_the_best_rank_r_approximation_split_evenly(shape):
    residual = _matrix(*shape, seed=1)
    s = torch.linalg.svdvals(residual)
    for rank in range(1, 5):
        b, a = lora_factors(residual, rank)
        assert b.shape == (shape[0], rank) and a.shape == (rank, shape[1])
        # Eckart-Young: the error is the norm of the dropped singular values
        error = torch.linalg.matrix_norm(residual - b @ a)
        assert float(error) == pytest.approx(float(s[rank:].norm()), abs=1e-10)
        # balanced: B^T B = A A^T = diag(S_R)
        torch.testing.assert_close(b.t() @ b, torch.diag(s[:rank]), rtol=0, atol=1e-10)
        torch.testing.assert_close(a @ a.t(), torch.diag(s[:rank]), rtol=0, atol=1e-10)
    b, a = lora_factors(residual, 4)  # full rank: exact
    torch.testing.assert_close(b @ a, residual, rtol=0, atol=1e-12)


def test_lora_factors_beyond_full_rank_and_with_a_scale():
    residual = _matrix(3, 5, seed=2)
    b, a = lora_factors(residual, 7)  # rank 7 > min(3, 5): zero columns beyond 3
    assert b.shape == (3, 7) and a.shape == (7, 5)
    assert torch.equal(b[:, 3:], torch.zeros(3, 4)) and torch.equal(a[3:], torch.zeros(4, 5))
    torch.testing.assert_close(b @ a, residual, rtol=0, atol=1e-12)
    b, a = lora_factors(residual, 3, scale=4.0)
    torch.testing.assert_close(4.0 * b @ a, residual, rtol=0, atol=1e-12)
    zero_b, zero_a = lora_factors(torch.zeros(3, 5), 2)  # identical layers: no delta
    assert not zero_b.any() and not zero_a.any()


# ---- models -----------------------------------------------------------------------------------


def _layer(model, stack, i, name):
    return dict(model.named_parameters(remove_duplicate=False))[f"{stack}.layers.{i}.{name}"]


def test_each_tied_parameter_becomes_the_mean_of_its_set(tmp_path_factory):
    data = data_bin(tmp_path_factory)
    _, _, old = build_for_data(data, "shared_transformer", FOUR, seed=1)
    _, _, new = build_for_data(data, "shared_transformer", FOUR + [
        "--encoder-share-strategy", "cycle_rev", "--encoder-unique-layers", "2",
        "--decoder-share-strategy", "sequence", "--decoder-unique-layers", "2",
        "--decoder-share-scope", "attn"], seed=9)
    report = convert_model(old, new)
    for name in ("fc1.weight", "self_attn.q_proj.bias", "final_layer_norm.weight"):
        for a, b in ((0, 3), (1, 2)):  # cycle_rev 1 2 2 1
            mean = (_layer(old, "encoder", a, name) + _layer(old, "encoder", b, name)) / 2
            torch.testing.assert_close(_layer(new, "encoder", a, name), mean, rtol=0, atol=1e-7)
            assert _layer(new, "encoder", b, name) is _layer(new, "encoder", a, name)
    mean = (_layer(old, "decoder", 2, "encoder_attn.k_proj.weight")
            + _layer(old, "decoder", 3, "encoder_attn.k_proj.weight")) / 2
    torch.testing.assert_close(_layer(new, "decoder", 3, "encoder_attn.k_proj.weight"), mean,
                               rtol=0, atol=1e-7)
    for i in range(4):  # scope attn: the FFN and LayerNorms stay each position's own
        for name in ("fc2.weight", "self_attn_layer_norm.bias"):
            assert torch.equal(_layer(new, "decoder", i, name), _layer(old, "decoder", i, name))
    assert torch.equal(new.encoder.embed_tokens.weight, old.encoder.embed_tokens.weight)
    for stack in ("encoder", "decoder"):
        rows = report[stack]["positions"]
        assert [r["set"] for r in rows] == ([1, 2, 2, 1] if stack == "encoder" else [1, 1, 2, 2])
        assert all(0.3 < r["before"] == r["after"] < 1 for r in rows)  # rank 0: nothing back


def test_layers_already_equal_within_sets_convert_exactly(tmp_path_factory):
    data = data_bin(tmp_path_factory)
    _, task, old = build_for_data(data, "shared_transformer", FOUR, seed=1)
    with torch.no_grad():
        for stack in (old.encoder, old.decoder):  # the layers of 1 2 2 1 as copies
            stack.layers[3].load_state_dict(stack.layers[0].state_dict())
            stack.layers[2].load_state_dict(stack.layers[1].state_dict())
    _, _, new = build_for_data(data, "shared_transformer", FOUR + [
        "--encoder-share-strategy", "cycle_rev", "--encoder-unique-layers", "2",
        "--decoder-share-strategy", "cycle_rev", "--decoder-unique-layers", "2"], seed=9)
    report = convert_model(old, new)
    assert all(r["before"] == 0 for s in report.values() for r in s["positions"])
    src, lengths, prev = random_batch(task)
    with torch.no_grad():
        assert torch.equal(new.eval()(src, lengths, prev)[0], old.eval()(src, lengths, prev)[0])


# ---- checkpoints ------------------------------------------------------------------------------


def _load(path):
    import fairseq_shared  # noqa: F401
    from fairseq import checkpoint_utils

    models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    return models[0], cfg, torch.load(path, weights_only=True)


@pytest.fixture(scope="module")
def vanilla_checkpoint(tmp_path_factory):
    """fairseq's own ``transformer`` (no fairseq-shared flags in its configuration)."""
    args, _, model = build_for_data(data_bin(tmp_path_factory), "transformer", FOUR, seed=4)
    assert type(model).__name__ == "TransformerModel"
    return save_checkpoint(tmp_path_factory.mktemp("vanilla") / "vanilla.pt", args, model)


def test_a_fairseq_transformer_checkpoint_converts_to_a_shared_one(vanilla_checkpoint, tmp_path):
    out = tmp_path / "shared.pt"
    report = convert_checkpoint(str(vanilla_checkpoint), str(out), {
        "encoder_share_strategy": "universal", "decoder_share_strategy": "1,2,1,2"})
    model, cfg, saved = _load(out)
    assert type(model).__name__ == "SharedTransformerModel"
    assert cfg.model.arch == "shared_transformer"
    assert (cfg.model.encoder_share_strategy, cfg.model.decoder_share_strategy) == ("universal",
                                                                                    "1,2,1,2")
    assert saved["args"] is None and saved["last_optimizer_state"] is None
    assert saved["extra_state"]["fairseq_shared_conversion"] == report
    assert model.sharing["decoder"].describe() == "cycle M=2 (1 2 1 2), scope=all"
    original = torch.load(vanilla_checkpoint, weights_only=False)["model"]
    key = "decoder.layers.{}.fc1.weight"
    torch.testing.assert_close(  # set 2 = positions 2 and 4, straight from the input file
        _layer(model, "decoder", 1, "fc1.weight"),
        (original[key.format(1)] + original[key.format(3)]) / 2, rtol=0, atol=1e-7)
    encoder_fc1 = torch.stack([original[f"encoder.layers.{i}.fc1.weight"] for i in range(4)])
    torch.testing.assert_close(_layer(model, "encoder", 2, "fc1.weight"), encoder_fc1.mean(0),
                               rtol=0, atol=1e-7)
    # stored once: a universal encoder holds one layer's tensors
    assert not any(k.startswith("encoder.layers.1.") for k in saved["model"])


def test_a_shared_checkpoint_converts_to_another_map_from_per_position_weights(
        vanilla_checkpoint, tmp_path):
    cycle_rev = tmp_path / "cycle_rev.pt"
    convert_checkpoint(str(vanilla_checkpoint), str(cycle_rev), {
        "encoder_share_strategy": "cycle_rev", "encoder_unique_layers": 2})
    before, _, _ = _load(cycle_rev)
    universal = tmp_path / "universal.pt"
    report = convert_checkpoint(str(cycle_rev), str(universal), {  # the old M = 2 would
        "encoder_share_strategy": "universal"})  # contradict it: M goes with the strategy
    after, cfg, _ = _load(universal)
    assert after.sharing["encoder"].describe() == "universal (1 1 1 1), scope=all"
    assert cfg.model.encoder_unique_layers is None
    assert after.sharing["decoder"].describe() == "none (no sharing) (1 2 3 4), scope=all"
    w = [_layer(before, "encoder", i, "fc2.weight") for i in range(4)]  # 1 2 2 1: a b b a
    torch.testing.assert_close(_layer(after, "encoder", 0, "fc2.weight"),
                               (w[0] + w[1] + w[2] + w[3]) / 4, rtol=0, atol=1e-7)
    assert report["stacks"]["decoder"]["positions"][0]["before"] == 0.0  # nothing tied there
    # and back: to no sharing then to cycle_rev again gives the tied weights exactly
    vanilla_again, back = tmp_path / "none.pt", tmp_path / "back.pt"
    convert_checkpoint(str(cycle_rev), str(vanilla_again), {"encoder_share_strategy": "none"})
    convert_checkpoint(str(vanilla_again), str(back), {
        "encoder_share_strategy": "cycle_rev", "encoder_unique_layers": 2})
    again, _, _ = _load(back)
    for (name, a), (_, b) in zip(before.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("flags,needle", [
    (["--encoder-share-strategy", "cycle", "--encoder-unique-layers", "3"],
     "--encoder-unique-layers=3 cannot be expressed by the cycle strategy for 4 layers"),
    (["--decoder-share-strategy", "cyclic"], "--decoder-share-strategy: unknown strategy "
     "'cyclic'; allowed: none, sequence"),
    (["--decoder-share-scope", "ffn_only"], "--decoder-share-scope: unknown scope 'ffn_only'; "
     "allowed: all, attn, ffn"),
    (["--encoder-share-lora-rank", "4"], "--encoder-share-lora-rank 4: the encoder ties no "
     "parameters"),
])
def test_bad_flags_stop_naming_the_flag_and_the_allowed_values(
        flags, needle, vanilla_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(vanilla_checkpoint), str(tmp_path / "out.pt"), *flags])
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "out.pt").exists()


def test_san_checkpoints_are_refused_saying_what_to_do(tmp_path, tmp_path_factory, capsys):
    args, _, model = build_for_data(data_bin(tmp_path_factory), "shared_transformer", FOUR + [
        "--san-self-policy", "1,3", "--san-cross-policy", "2,2"])
    path = save_checkpoint(tmp_path / "san.pt", args, model)
    with pytest.raises(SystemExit):
        main([str(path), str(tmp_path / "out.pt"), "--decoder-share-strategy", "universal"])
    err = capsys.readouterr().err
    assert "--san-self-policy 1,3" in err and "fairseq_shared.cli.convert_policy" in err


def test_the_converted_checkpoint_decodes_and_fine_tunes_with_fairseq(
        vanilla_checkpoint, tmp_path, tmp_path_factory, capsys):
    data = data_bin(tmp_path_factory)
    out = tmp_path / "cycle.pt"
    main([str(vanilla_checkpoint), str(out), "--encoder-share-strategy", "cycle",
          "--encoder-unique-layers", "2", "--decoder-share-strategy", "universal",
          "--decoder-share-scope", "ffn"])
    printed = capsys.readouterr().out
    assert "encoder: cycle M=2 (1 2 1 2), scope=all" in printed
    flags = printed.rsplit("fine-tune it with: ", 1)[1].split()
    _, generated = run_tool("fairseq-generate", data, "--path", out, "--user-dir", USER_DIR,
                            "--beam", "2", "--batch-size", "12", "--cpu", "--max-len-b", "10",
                            "--required-batch-size-multiple", "1")
    assert generated.count("\nH-") == 12
    _, trained = run_tool(
        "fairseq-train", data, "--user-dir", USER_DIR, *flags, *TINY, *FOUR,
        "--finetune-from-model", out, "--optimizer", "adam", "--lr", "0.001",
        "--max-tokens", "500", "--max-update", "1", "--cpu", "--num-workers", "0",
        "--save-dir", tmp_path / "ft", "--no-save", "--disable-validation")
    assert "loading pretrained model from" in trained and "done training" in trained


# ---- relaxed sharing: per-position low-rank deltas from the SVD of the residual ----------------

LORA_FULL = ["--encoder-share-strategy", "cycle_rev", "--encoder-unique-layers", "2",
             "--decoder-share-strategy", "universal", "--encoder-share-lora-rank", "16",
             "--decoder-share-lora-rank", "16", "--encoder-untie-norms", "--encoder-untie-biases",
             "--decoder-untie-norms", "--decoder-untie-biases"]


def test_full_rank_deltas_reproduce_the_original_translations(vanilla_checkpoint, tmp_path,
                                                              tmp_path_factory, capsys):
    """R = d = 16 with per-position norms and biases: every position's weight is
    W_set + B A = W_pos up to float32 rounding, so beam search finds the same hypotheses."""
    from helpers_model import beam_search

    out = tmp_path / "relaxed.pt"
    main([str(vanilla_checkpoint), str(out), *LORA_FULL])
    printed = capsys.readouterr().out
    assert "--encoder-share-lora-rank 16 --encoder-untie-norms --encoder-untie-biases" in printed
    original, _, _ = _load(vanilla_checkpoint)
    relaxed, cfg, saved = _load(out)
    assert cfg.model.decoder_share_lora_rank == 16 and cfg.model.decoder_untie_norms is True
    report = saved["extra_state"]["fairseq_shared_conversion"]["stacks"]
    for stack in ("encoder", "decoder"):
        for row in report[stack]["positions"]:
            assert row["before"] > 0.3 and row["after"] < 1e-6
    task = build_for_data(data_bin(tmp_path_factory), "transformer", FOUR)[1]
    src, lengths, prev = random_batch(task, bsz=4, src_len=8, seed=3)
    original.eval(), relaxed.eval()
    with torch.no_grad():
        a = original.get_normalized_probs(original(src, lengths, prev), log_probs=True)
        b = relaxed.get_normalized_probs(relaxed(src, lengths, prev), log_probs=True)
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
    for hyps_a, hyps_b in zip(beam_search(original, task, src, lengths, True),
                              beam_search(relaxed, task, src, lengths, True)):
        for x, y in zip(hyps_a, hyps_b):
            assert torch.equal(x["tokens"], y["tokens"])
            torch.testing.assert_close(x["score"], y["score"], rtol=0, atol=1e-5)
    # a relaxed checkpoint converts on from its merged per-position weights
    plain = tmp_path / "plain.pt"
    convert_checkpoint(str(out), str(plain), {"encoder_share_strategy": "none",
                                              "decoder_share_strategy": "none"})
    back, _, _ = _load(plain)
    for name, value in original.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], value, rtol=0, atol=1e-6)


def test_low_rank_deltas_are_the_best_rank_r_part_of_each_residual(vanilla_checkpoint, tmp_path):
    out = tmp_path / "rank2.pt"
    report = convert_checkpoint(str(vanilla_checkpoint), str(out), {
        "decoder_share_strategy": "cycle", "decoder_unique_layers": 2,
        "decoder_share_lora_rank": 2})
    original, _, _ = _load(vanilla_checkpoint)
    relaxed, _, _ = _load(out)
    merged = relaxed.full_state_dict()
    name = "decoder.layers.{}.self_attn.v_proj.weight"
    w1, w3 = (original.state_dict()[name.format(i)] for i in (1, 3))  # set 2 of 1 2 1 2
    residual = (w1 - (w1 + w3) / 2).double()
    error = torch.linalg.matrix_norm(residual - (merged[name.format(1)] - (w1 + w3) / 2).double())
    tail = torch.linalg.svdvals(residual)[2:].norm()
    assert float(error) == pytest.approx(float(tail), rel=1e-4)
    for row in report["stacks"]["decoder"]["positions"]:
        assert 0 < row["after"] < row["before"]  # biases and norms stay averaged
