"""One checkpoint loader for every tool (issue 20, items 1 and 4): a clear one-line message for
every bad file (empty, truncated, not a torch file, unsafe, the wrong kind of model, a moved
data directory), no tool overwriting its input, atomic saves, and the newest whole
checkpoint of a save directory."""

import os
import re
import shutil

import pytest
import torch

from fairseq_shared import checkpoint_io
from fairseq_shared.checkpoint_io import CheckpointError
from fairseq_shared.cli import average_checkpoints, convert_policy, convert_sharing
from fairseq_shared.cli import learn_policy, learn_sharing, time_generate
from fairseq_shared.cli.errors import split_debug
from fairseq_shared.tools.checkpoints import open_checkpoint, with_config
from helpers_checkpoint import build_for_data, save_checkpoint
from helpers_data import data_bin
from helpers_lm import TINY_LM, parse_lm_args

torch.set_num_threads(1)

FOUR = ["--encoder-layers", "2", "--decoder-layers", "2"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A translation checkpoint, a language model's, one with a moved data directory, and
    bad files made from them."""
    root = tmp_path_factory.mktemp("checkpoints")
    data = data_bin(tmp_path_factory)
    args, _, model = build_for_data(data, "shared_transformer", FOUR, seed=2)
    paths = {"good": save_checkpoint(root / "good.pt", args, model)}
    moved = shutil.copytree(data, root / "moved_data")
    args.data = str(moved)
    paths["moved"] = save_checkpoint(root / "moved.pt", args, model)
    shutil.rmtree(moved)  # the data directory the checkpoint names is gone
    from helpers_lm import build_lm

    lm_flags = TINY_LM + ["--decoder-layers", "2", "--decoder-unique-layers", "1"]
    lm, _ = build_lm("transformer_lm_cycle_rev", lm_flags)
    paths["lm"] = save_checkpoint(root / "lm.pt", parse_lm_args("transformer_lm_cycle_rev",
                                                                lm_flags), lm)
    whole = paths["good"].read_bytes()
    (root / "empty.pt").write_bytes(b"")
    (root / "half.pt").write_bytes(whole[: len(whole) // 2])
    (root / "random.pt").write_bytes(os.urandom(4096))
    (root / "text.pt").write_text("not a checkpoint\n" * 20)

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {root / 'PWNED'}",))

    torch.save({"model": {"w": torch.zeros(1)}, "evil": Payload()}, root / "unsafe.pt")
    for name in ("empty", "half", "random", "text", "unsafe"):
        paths[name] = root / f"{name}.pt"
    paths["data"] = data
    return paths


BAD = {
    "empty": "the checkpoint file is empty (0 bytes",
    "half": "the checkpoint file is truncated or corrupt",
    "random": "not a PyTorch checkpoint file",
    "text": "not a PyTorch checkpoint file",
    "unsafe": "refused by safe loading: the file refers to posix.system",
}


# ---- the loader ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_bad_file_gets_one_message_naming_it(files, name):
    for load in (checkpoint_io.load, checkpoint_io.load_raw):
        with pytest.raises(CheckpointError) as error:
            load(str(files[name]))
        message = str(error.value)
        assert message.startswith(f"{files[name]}: ") and BAD[name] in message
        assert "weights_only=False" not in message and "\n" not in message
        assert error.value.__cause__ is None  # torch's own advice stays hidden
    assert not (files["good"].parent / "PWNED").exists()


def test_a_missing_file_and_the_fairseq_loader_through_compat(files, tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        checkpoint_io.load(str(tmp_path / "missing.pt"))
    from fairseq import checkpoint_utils  # fairseq's own loader (fairseq-generate, -train)

    with pytest.raises(CheckpointError, match="truncated or corrupt") as error:
        checkpoint_utils.load_model_ensemble([str(files["half"])])
    assert str(files["half"]) in str(error.value)


def test_the_kind_of_model_is_checked(files):
    state = checkpoint_io.load(str(files["good"]), expect="translation")
    assert checkpoint_io.checkpoint_kind(state) == "translation"
    with pytest.raises(CheckpointError) as error:
        checkpoint_io.load(str(files["lm"]), expect="translation", tool="convert_sharing")
    assert str(error.value) == (f"{files['lm']} is a language model checkpoint; "
                                "convert_sharing needs a translation checkpoint")
    with pytest.raises(CheckpointError, match="is a translation checkpoint; time_generate needs "
                       "a language model checkpoint"):
        checkpoint_io.load(str(files["good"]), expect="language_model", tool="time_generate")
    kinds = {name: checkpoint_io.task_kind(name) for name in (
        "translation", "translation_multi_simple_epoch", "language_modeling", "audio_pretraining")}
    assert kinds == {"translation": "translation", "translation_multi_simple_epoch": "translation",
                     "language_modeling": "language_model",
                     "audio_pretraining": "audio_pretraining"}  # not refused: the tool decides


def test_a_moved_data_directory_says_to_pass_data(files):
    from fairseq_shared.tools.learn_sharing import TAKES

    with pytest.raises(CheckpointError) as error:
        open_checkpoint(str(files["moved"]), "learn_sharing", TAKES)
    message = str(error.value)
    assert message.startswith(f"{files['moved']}: its data directory") and "pass --data" in message
    loaded = open_checkpoint(str(files["moved"]), "learn_sharing", TAKES, data=str(files["data"]))
    assert loaded.cfg.task.data == str(files["data"]) and len(loaded.model.encoder.layers) == 2


def test_debug_keeps_the_underlying_error(files, monkeypatch):
    monkeypatch.setenv(checkpoint_io.DEBUG_ENV, "1")
    with pytest.raises(CheckpointError) as error:
        checkpoint_io.load_raw(str(files["half"]))
    assert error.value.__cause__ is not None
    assert split_debug(["a", "--debug", "b", "--", "--debug"]) == (["a", "b", "--", "--debug"],
                                                                  True)


# ---- writing ----------------------------------------------------------------------------------


def test_rebuilt_config_is_plain_resolved_and_replaces_the_legacy_args():
    from argparse import Namespace

    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"common": {"seed": 3}, "task": {"_name": "translation",
                                                             "seed": "${common.seed}"},
                            "model": {"old": 1}})
    model = Namespace(arch="shared_transformer")
    state = with_config({"args": Namespace(arch="transformer")}, cfg, model)
    assert state["args"] is None and state["cfg"]["model"] is model
    assert state["cfg"]["task"] == {"_name": "translation", "seed": 3}
    assert type(state["cfg"]["common"]) is dict


def test_save_is_atomic(tmp_path):
    path = tmp_path / "out.pt"
    checkpoint_io.save({"model": {"w": torch.ones(2)}}, str(path))
    assert torch.equal(torch.load(path)["model"]["w"], torch.ones(2))
    with pytest.raises(Exception):  # cannot be pickled: the old file stays whole
        checkpoint_io.save({"model": {"w": torch.zeros(2)}, "bad": lambda: 0}, str(path))
    assert torch.equal(torch.load(path)["model"]["w"], torch.ones(2))
    assert os.listdir(tmp_path) == ["out.pt"]  # no temporary file left behind


def test_newest_intact_skips_torn_files(files, tmp_path):
    for name, source, age in (("checkpoint_1_2.pt", "good", 30), ("checkpoint_1_4.pt", "good", 20),
                              ("checkpoint_best.pt", "half", 10), ("checkpoint_last.pt", "empty", 0)):
        shutil.copy(files[source], tmp_path / name)
        t = 1_000_000 - age
        os.utime(tmp_path / name, (t, t))
    assert checkpoint_io.newest_intact(str(tmp_path)) == str(tmp_path / "checkpoint_1_4.pt")
    assert checkpoint_io.newest_intact(str(tmp_path), exclude=[tmp_path / "checkpoint_1_4.pt"]) \
        == str(tmp_path / "checkpoint_1_2.pt")
    assert not checkpoint_io.intact(str(files["half"])) and checkpoint_io.intact(str(files["good"]))


def test_refuse_overwrite_names_both_paths_through_links(tmp_path):
    a = tmp_path / "a.pt"
    a.write_bytes(b"x")
    os.symlink(a, tmp_path / "link.pt")
    os.link(a, tmp_path / "hard.pt")
    for out in (a, tmp_path / "link.pt", tmp_path / "hard.pt", tmp_path / "." / "a.pt"):
        with pytest.raises(CheckpointError, match=f"--output {out} would overwrite the input "):
            checkpoint_io.refuse_overwrite([str(a)], [str(out)], {str(out): "--output"})
    checkpoint_io.refuse_overwrite([str(a)], [str(tmp_path / "b.pt")])  # another file: fine
    with pytest.raises(CheckpointError, match="would overwrite the input"):  # into a directory
        checkpoint_io.refuse_overwrite([str(a)], checkpoint_io.files_in(str(tmp_path), ["a.pt"]))


# ---- the tools ---------------------------------------------------------------------------------


def _fails(main, argv, capsys):
    """``main(argv)`` exits non-zero with one error line and no traceback; that line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code not in (0, None)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "weights_only=False" not in err
    return [line for line in err.splitlines() if "error:" in line][-1]


@pytest.mark.parametrize("name", sorted(BAD))
def test_tools_report_a_bad_file_in_one_line(files, name, tmp_path, capsys):
    bad = str(files[name])
    runs = [
        (convert_sharing.main, [bad, str(tmp_path / "o.pt"), "--decoder-share-strategy", "universal"]),
        (convert_policy.main, [bad, str(tmp_path / "o.pt"), "--san-self-policy", "1,1"]),
        (average_checkpoints.main, ["--inputs", bad, str(files["good"]), "--output",
                                    str(tmp_path / "o.pt")]),
        (learn_sharing.main, [bad, "--sets", "1", "--out-dir", str(tmp_path / "d")]),
        (learn_policy.main, [bad, "--out-dir", str(tmp_path / "d")]),
    ]
    for main, argv in runs:
        line = _fails(main, argv, capsys)
        assert f"error: {bad}: " in line and BAD[name] in line, (main.__module__, line)
    assert not (tmp_path / "o.pt").exists()


def test_debug_shows_the_traceback(files, tmp_path):
    with pytest.raises(CheckpointError):
        convert_sharing.main([str(files["half"]), str(tmp_path / "o.pt"), "--debug"])
    assert checkpoint_io.DEBUG_ENV not in os.environ  # restored after the command


def test_tools_refuse_the_wrong_kind_and_a_moved_data_directory(files, tmp_path, capsys):
    line = _fails(convert_sharing.main, [str(files["lm"]), str(tmp_path / "o.pt")], capsys)
    assert line.endswith(f"{files['lm']} is a language model checkpoint; convert_sharing needs "
                         "a translation checkpoint (--debug shows the traceback)")
    line = _fails(learn_policy.main, [str(files["lm"]), "--out-dir", str(tmp_path)], capsys)
    assert "is a language model checkpoint; learn_policy needs a translation" in line
    line = _fails(time_generate.main, [str(files["data"]), "--checkpoint", str(files["lm"]),
                                       "--", "--cpu"], capsys)
    assert "is a language model checkpoint; time_generate needs a translation" in line
    line = _fails(learn_sharing.main, [str(files["moved"]), "--sets", "1", "--out-dir",
                                       str(tmp_path / "d")], capsys)
    assert "its data directory" in line and "pass --data DIR" in line


def _unchanged(path, before):
    assert path.read_bytes() == before, f"{path} was overwritten"


def test_no_tool_overwrites_its_input(files, tmp_path, capsys):
    x = tmp_path / "X.pt"
    shutil.copy(files["good"], x)
    b = tmp_path / "b.pt"
    shutil.copy(files["good"], b)
    before = x.read_bytes()
    cases = [
        (convert_sharing.main, [str(x), str(x), "--decoder-share-strategy", "universal"],
         f"{x} would overwrite the input {x}"),
        (convert_sharing.main, [str(x), str(tmp_path / "y.pt"), "--report", str(x)],
         f"--report {x} would overwrite the input {x}"),
        (convert_policy.main, [str(x), str(x), "--san-self-policy", "1,1"],
         f"{x} would overwrite the input {x}"),
        (average_checkpoints.main, ["--inputs", str(x), str(b), "--output", str(b)],
         f"--output {b} would overwrite the input {b}"),
        (learn_sharing.main, [str(tmp_path / "sharing.json"), "--sets", "1",
                              "--out-dir", str(tmp_path)], "sharing.json would overwrite"),
        (time_generate.main, [str(files["data"]), "--checkpoint", f"X={x}", "--out",
                              str(tmp_path), "--", "--cpu"], None),
    ]
    shutil.copy(files["good"], tmp_path / "sharing.json")
    for main, argv, needle in cases:
        if main is time_generate.main:  # a model named so that its hypotheses would replace it
            shutil.copy(x, tmp_path / "hyp.X.txt")
            argv[2] = f"X={tmp_path / 'hyp.X.txt'}"
            needle = f"{tmp_path / 'hyp.X.txt'} would overwrite the input"
        line = _fails(main, argv, capsys)
        assert needle in line, line
        _unchanged(x, before)
        _unchanged(b, before)
    assert sorted(os.listdir(tmp_path)) == ["X.pt", "b.pt", "hyp.X.txt", "sharing.json"]


# ---- corrupt files, weights that are not finite, full disks (issue 38, items 2 and 3) -----------


def _flipped(source, path):
    """``source`` with one byte of its tensor data changed: the zip directory still reads."""
    data = bytearray(source.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def test_a_flipped_byte_is_caught_by_the_zip_crc(files, tmp_path, capsys):
    bad = _flipped(files["good"], tmp_path / "flipped.pt")
    with pytest.raises(CheckpointError, match=rf"{bad}: the checkpoint file is corrupt: the CRC "
                       "of its member .* does not match"):
        checkpoint_io.load_raw(str(bad))
    assert not checkpoint_io.intact(str(bad)) and checkpoint_io.intact(str(files["good"]))
    for main, argv in (
            (convert_sharing.main, [str(bad), str(tmp_path / "o.pt"),
                                    "--decoder-share-strategy", "universal"]),
            (average_checkpoints.main, ["--inputs", str(bad), str(files["good"]),
                                        "--output", str(tmp_path / "o.pt")])):
        assert f"error: {bad}: the checkpoint file is corrupt: the CRC" in _fails(main, argv, capsys)
    assert not (tmp_path / "o.pt").exists()


def test_weights_that_are_not_finite_are_never_written(files, tmp_path, capsys):
    with pytest.raises(CheckpointError, match=r"o\.pt: not written: w holds 1 non-finite"):
        checkpoint_io.save({"model": {"w": torch.tensor([1.0, float("inf")])}},
                           str(tmp_path / "o.pt"))
    huge = _with_non_finite(files["good"], tmp_path / "huge.pt", float("nan"))
    line = _fails(average_checkpoints.main, ["--inputs", str(huge), str(huge), "--output",
                                             str(tmp_path / "o.pt")], capsys)
    assert f"{huge}: cannot be used: its tensor" in line  # refused on reading, before writing
    assert sorted(os.listdir(tmp_path)) == ["huge.pt"]


def _with_non_finite(source, path, value, name=None):
    """``source`` with one value of its tensor ``name`` (default: the first floating-point
    one) set to ``value``, saved whole (valid CRCs): a diverged model or a corrupt writer."""
    state = torch.load(source, weights_only=False)
    name = name or next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][name].view(-1)[-1] = value
    torch.save(state, path)
    return path


@pytest.mark.parametrize("name, value", [
    ("encoder.embed_tokens.weight", float("nan")),  # tied: the decoder's input and output
    ("encoder.layers.1.fc1.weight", float("inf")),
    ("decoder.layers.0.self_attn.k_proj.bias", float("-inf")),
])
def test_a_non_finite_weight_is_named_with_its_file_by_every_loader(files, tmp_path, capsys,
                                                                    name, value):
    """Issue 57: a NaN in a tied tensor made generate, distill and time_generate blame the
    sharing configuration; in an untied one fairseq failed on an assertion. The one loader
    (``checkpoint_io.read``, which compat gives fairseq's own commands) names file and tensor."""
    bad = _with_non_finite(files["good"], tmp_path / "bad.pt", value, name)
    expected = f"{bad}: cannot be used: its tensor {name} holds 1 non-finite value(s)"
    for load in (checkpoint_io.load_raw, checkpoint_io.load):
        with pytest.raises(checkpoint_io.NonFiniteError) as error:
            load(str(bad))
        assert str(error.value).startswith(expected)
    from fairseq import checkpoint_utils  # fairseq's own loader, as fairseq-generate calls it

    with pytest.raises(checkpoint_io.NonFiniteError, match=re.escape(expected)):
        checkpoint_utils.load_model_ensemble([str(bad)])
    from fairseq_shared.distill.run import load_teacher

    with pytest.raises(checkpoint_io.NonFiniteError, match=re.escape(expected)):
        load_teacher([str(bad)], str(files["data"]))
    line = _fails(time_generate.main, [str(files["data"]), "--checkpoint", str(bad),
                                       "--", "--cpu"], capsys)
    assert line == f"time_generate: error: {expected} (NaN or infinity; a corrupt file or a " \
                   "diverged model) (--debug shows the traceback)"
    line = _fails(convert_sharing.main, [str(bad), str(tmp_path / "o.pt")], capsys)
    assert expected in line
    assert sorted(os.listdir(tmp_path)) == ["bad.pt"]


def test_fairseq_generate_names_a_non_finite_weight_in_one_line(files, tmp_path):
    from helpers_data import USER_DIR, run_tool

    bad = _with_non_finite(files["good"], tmp_path / "bad.pt", float("nan"),
                           "encoder.embed_tokens.weight")
    code, out = run_tool("fairseq-generate", files["data"], "--user-dir", USER_DIR, "--path",
                         bad, "--cpu", "--beam", "1", check=False)
    assert code == 1 and "Traceback" not in out
    assert (f"fairseq-generate: error: {bad}: cannot be used: its tensor "
            "encoder.embed_tokens.weight holds 1 non-finite value(s)") in out


def test_a_full_disk_leaves_the_old_file_and_names_path_and_cause(files, tmp_path, monkeypatch,
                                                                   capsys):
    import errno

    out = tmp_path / "o.pt"
    checkpoint_io.save({"model": {"w": torch.ones(2)}}, str(out))
    before = out.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CheckpointError, match=rf"{out}: cannot write it: No space left on device "
                       r"\(ENOSPC\); nothing was replaced"):
        checkpoint_io.save({"model": {"w": torch.zeros(2)}}, str(out))
    line = _fails(convert_sharing.main, [str(files["good"]), str(out),
                                         "--decoder-share-strategy", "universal"], capsys)
    assert f"{out}: cannot write it: No space left on device (ENOSPC)" in line
    assert out.read_bytes() == before and os.listdir(tmp_path) == ["o.pt"]


def test_a_symlink_is_replaced_never_written_through(tmp_path):
    other = tmp_path / "other.pt"
    other.write_bytes(b"keep")
    os.symlink(other, tmp_path / "o.pt")
    checkpoint_io.save({"model": {"w": torch.ones(1)}}, str(tmp_path / "o.pt"))
    assert other.read_bytes() == b"keep" and not (tmp_path / "o.pt").is_symlink()
