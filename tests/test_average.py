"""fairseq-shared-average: fairseq's checkpoint averaging, safe and aware of tied tensors."""

import os

import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_shared.cli import average_checkpoints as avg
from helpers_data import USER_DIR, data_bin, run_tool, trained_checkpoints

EPOCHS = ["checkpoint1.pt", "checkpoint2.pt", "checkpoint3.pt"]


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return trained_checkpoints(tmp_path_factory)


def expected_mean(paths):
    states = [torch.load(p)["model"] for p in paths]
    return {k: torch.stack([s[k].double() for s in states]).mean(0) for k in states[0]}


def assert_is_mean(averaged, paths):
    mean = expected_mean(paths)
    assert list(averaged) == list(torch.load(paths[0])["model"])
    for key, value in mean.items():
        if value.is_floating_point() and averaged[key].is_floating_point():
            assert averaged[key].dtype == torch.float32
            assert torch.allclose(averaged[key].double(), value, rtol=1e-6, atol=1e-7), key


def test_average_of_three_is_elementwise_mean_and_decodes(ckpt_dir, tmp_path, tmp_path_factory):
    out = tmp_path / "avg.pt"
    run_tool("fairseq-shared-average", "--inputs", ckpt_dir, "--num-epoch-checkpoints", "3",
             "--output", out)
    averaged = torch.load(out)  # safe loading
    paths = [ckpt_dir / name for name in EPOCHS]
    assert_is_mean(averaged["model"], paths)
    # the three really differ (so the mean is a real test)
    a, b = (torch.load(p)["model"]["decoder.layers.0.fc1.weight"] for p in paths[:2])
    assert not torch.equal(a, b)
    # fairseq layout: the newest input's metadata (epoch 3) and everything fairseq reads
    newest = torch.load(ckpt_dir / "checkpoint3.pt")
    assert averaged.keys() == newest.keys()
    assert averaged["extra_state"]["train_iterator"]["epoch"] == newest["extra_state"]["train_iterator"]["epoch"]
    # tied tensors: stored once, and --share-all-embeddings' three names are still one tensor
    assert "decoder.layers.3.fc1.weight" not in averaged["model"]
    emb = [averaged["model"][k] for k in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                                          "decoder.output_projection.weight")]
    assert emb[0].untyped_storage().data_ptr() == emb[1].untyped_storage().data_ptr() == (
        emb[2].untyped_storage().data_ptr())

    # the averaged model loads into the tied model and decodes with fairseq-generate
    [model], _, _ = checkpoint_utils.load_model_ensemble_and_task([str(out)])
    assert model.decoder.layers[3].fc1.weight is model.decoder.layers[0].fc1.weight
    assert torch.equal(model.decoder.layers[3].fc1.weight, averaged["model"]["decoder.layers.0.fc1.weight"])
    _, log = run_tool(
        "fairseq-generate", data_bin(tmp_path_factory), "--user-dir", USER_DIR, "--path", out,
        "--cpu", "--beam", "2", "--batch-size", "16", "--required-batch-size-multiple", "1",
    )
    assert sum(line.startswith("H-") for line in log.splitlines()) == 12
    assert "BLEU4" in log


def test_explicit_inputs_and_upper_bound(ckpt_dir, tmp_path):
    files = [str(ckpt_dir / name) for name in EPOCHS[:2]]
    avg.main(["--inputs", *files, "--output", str(tmp_path / "a.pt")])
    avg.main(["--inputs", str(ckpt_dir), "--num-epoch-checkpoints", "2",
              "--checkpoint-upper-bound", "2", "--output", str(tmp_path / "b.pt")])
    a, b = torch.load(tmp_path / "a.pt")["model"], torch.load(tmp_path / "b.pt")["model"]
    assert_is_mean(a, files)
    for key in a:
        assert torch.equal(a[key], b[key])


def test_tied_duplicates_are_averaged_once_and_stay_identical(ckpt_dir, tmp_path):
    """A state dict that lists a tied tensor under several names (shared storage)."""
    aliases = {"decoder.layers.3.fc1.weight": "decoder.layers.0.fc1.weight",
               "encoder.layers.2.self_attn.k_proj.weight": "encoder.layers.1.self_attn.k_proj.weight"}
    paths = []
    for name in EPOCHS:
        state = torch.load(ckpt_dir / name)
        for alias, owner in aliases.items():
            state["model"][alias] = state["model"][owner]  # same tensor, like state_dict() would
        paths.append(tmp_path / name)
        torch.save(state, paths[-1])
    out = tmp_path / "avg.pt"
    avg.main(["--inputs", *map(str, paths), "--output", str(out)])
    averaged = torch.load(out)["model"]
    assert_is_mean(averaged, paths)
    for alias, owner in aliases.items():
        assert averaged[alias].untyped_storage().data_ptr() == averaged[owner].untyped_storage().data_ptr()
        assert torch.equal(averaged[alias], averaged[owner])
    # and the tied model accepts it (the alias equals its owner)
    [model], _, _ = checkpoint_utils.load_model_ensemble_and_task([str(out)])
    assert torch.equal(model.decoder.layers[3].fc1.weight, averaged["decoder.layers.0.fc1.weight"])

    # ties must be the same in every input
    broken = torch.load(paths[1])
    broken["model"]["decoder.layers.3.fc1.weight"] = broken["model"]["decoder.layers.0.fc1.weight"].clone()
    torch.save(broken, tmp_path / "broken.pt")
    with pytest.raises(SystemExit):
        avg.main(["--inputs", str(paths[0]), str(tmp_path / "broken.pt"), "--output", str(out)])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num-epoch-checkpoints", "10"],
         "--num-epoch-checkpoints 10: '{dir}' holds only 3 epoch checkpoints"),
        (["--num-epoch-checkpoints", "10"], "allowed values: 1..3"),
        (["--num-epoch-checkpoints", "3", "--checkpoint-upper-bound", "2"], "allowed values: 1..2"),
        (["--num-update-checkpoints", "1"], "holds only 0 update checkpoints"),
        (["--num-epoch-checkpoints", "0"], "--num-epoch-checkpoints must be >= 1 (got 0)"),
        (["--num-epoch-checkpoints", "1", "--num-update-checkpoints", "1"], "not allowed with"),
        (["--checkpoint-upper-bound", "2"], "--checkpoint-upper-bound needs --num-epoch-checkpoints"),
    ],
)
def test_bad_flags_are_reported_by_name(ckpt_dir, tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        avg.main(["--inputs", str(ckpt_dir), "--output", str(tmp_path / "x.pt"), *flags])
    assert exit_info.value.code == 2
    assert message.format(dir=ckpt_dir) in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_bad_inputs(ckpt_dir, tmp_path, capsys):
    out = str(tmp_path / "x.pt")
    with pytest.raises(SystemExit):
        avg.main(["--inputs", str(tmp_path / "missing.pt"), "--output", out])
    assert "--inputs: no such checkpoint file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        avg.main(["--inputs", str(ckpt_dir), "--num-epoch-checkpoints", "1",
                  "--output", str(tmp_path / "no" / "dir.pt")])
    assert "--output: directory" in capsys.readouterr().err

    # unsafe pickles are refused, not run
    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"model": {"w": torch.zeros(1)}, "evil": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(SystemExit):
        avg.main(["--inputs", str(tmp_path / "evil.pt"), str(ckpt_dir / "checkpoint1.pt"),
                  "--output", out])
    assert "refused by safe loading" in capsys.readouterr().err
    assert not marker.exists()
    assert not os.path.exists(out)


@pytest.mark.parametrize("other, flags, differs", [
    # the same tensors, another layer map: averaged, the map [0,1,0,0] would be neither's
    ("transformer_cycle", [], "--decoder-share-strategy cycle against cycle_rev"),
    # the same tensors and map, another function
    ("transformer_cycle_rev", ["--activation-fn", "gelu"], "--activation-fn gelu against relu"),
])
def test_checkpoints_of_another_model_are_refused_naming_both_and_what_differs(
        tmp_path, tmp_path_factory, capsys, other, flags, differs):
    from helpers_checkpoint import build_for_data, save_checkpoint

    data = data_bin(tmp_path_factory)
    layers = ["--encoder-layers", "4", "--decoder-layers", "4",
              "--encoder-unique-layers", "2", "--decoder-unique-layers", "2"]
    a = save_checkpoint(tmp_path / "a.pt", *build_for_data(data, "transformer_cycle_rev",
                                                           layers)[::2])
    b = save_checkpoint(tmp_path / "b.pt", *build_for_data(data, other, layers + flags,
                                                           seed=3)[::2])
    out = tmp_path / "avg.pt"
    with pytest.raises(SystemExit) as exit_info:
        avg.main(["--inputs", str(a), str(b), "--output", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"'{b}' is another model than '{a}': {differs}; only checkpoints of one model" in err
    assert not out.exists()
    # the option alone is not what is checked: the layer map (an integer tensor) is too
    state = torch.load(b)
    state["args"] = torch.load(a)["args"]
    torch.save(state, b)
    if other == "transformer_cycle":
        with pytest.raises(SystemExit):
            avg.main(["--inputs", str(a), str(b), "--output", str(out)])
        assert (f"its encoder.sharing_map_version is [0, 1, 0, 1] against [0, 1, 1, 0]"
                in capsys.readouterr().err)
    else:  # the same model, two initialisations (dropout could differ too): averaged
        state["args"].dropout = 0.3
        torch.save(state, b)
        avg.main(["--inputs", str(a), str(b), "--output", str(out)])
        assert_is_mean(torch.load(out)["model"], [a, b])
