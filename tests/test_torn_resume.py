"""fairseq's own commands with the plug-in loaded (issue 20, items 3 and 4): a torn
``checkpoint_last.pt`` never blocks a resume, and a bad checkpoint file gets a message that
names it."""

import re
import shutil

import pytest
import torch

from helpers_data import ENV, TINY_ARCH, TINY_TRAIN, USER_DIR, data_bin, run_tool

# 9 updates an epoch: interval checkpoints at updates 4, 8 (epoch 1) and 12 (epoch 2, its
# third batch), an end-of-epoch checkpoint1.pt at update 9; the run ends at update 14
INTERVAL, TOTAL = 4, 14
MID_EPOCH_2 = f"checkpoint_2_{3 * INTERVAL}.pt"
TRAIN = [*TINY_ARCH, *TINY_TRAIN, "--max-tokens", "150", "--seed", "2",
         "--save-interval-updates", str(INTERVAL), "--max-update", str(TOTAL)]
#: fairseq's own transformer, of the same size, with the plug-in loaded
STOCK = ["--user-dir", USER_DIR, "--arch", "transformer", "--share-all-embeddings",
         *(f for side in ("encoder", "decoder") for f in (
             f"--{side}-layers", "2", f"--{side}-embed-dim", "32",
             f"--{side}-ffn-embed-dim", "64", f"--{side}-attention-heads", "2")),
         "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
         *TINY_TRAIN, "--max-tokens", "150", "--seed", "2",
         "--save-interval-updates", str(INTERVAL), "--max-update", str(TOTAL)]


def _train(data, save_dir, check=True, flags=TRAIN):
    return run_tool("fairseq-train", data, *flags, "--save-dir", save_dir, check=check)


def _valid_losses(log):
    return [float(x) for x in re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", log)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    data = data_bin(tmp_path_factory)
    save_dir = tmp_path_factory.mktemp("uninterrupted")
    _, log = _train(data, save_dir)
    assert (save_dir / MID_EPOCH_2).is_file() and (save_dir / "checkpoint1.pt").is_file()
    return data, save_dir, log


def _model(path):
    return torch.load(path, weights_only=True)["model"]


def _assert_same_model(path, expected_path):
    final, expected = _model(path), _model(expected_path)
    assert final.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(final[name], tensor), name


@pytest.mark.parametrize("torn", ["empty", "half", "missing"])
def test_a_torn_checkpoint_last_resumes_from_the_newest_whole_one(uninterrupted, torn, tmp_path):
    """As a kill during fairseq's copy to checkpoint_last.pt leaves it: the interval
    checkpoint (in epoch 2) whole, checkpoint_last.pt empty or cut short; or, as a full disk
    leaves it (issue 38), missing. The resume restores the interval checkpoint, says so, and
    ends where the uninterrupted run ended, bit for bit."""
    data, done, log = uninterrupted
    interval = tmp_path / MID_EPOCH_2
    shutil.copy(done / interval.name, interval)
    whole = interval.read_bytes()
    if torn != "missing":
        (tmp_path / "checkpoint_last.pt").write_bytes(b"" if torn == "empty" else
                                                      whole[: len(whole) // 2])
    _, resumed = _train(data, tmp_path)
    problem = (" is missing" if torn == "missing" else
               ": the checkpoint file is (empty|truncated).*")
    assert re.search(rf"checkpoint_last\.pt{problem}; resuming from {re.escape(str(interval))} "
                     "instead", resumed)
    assert re.search(rf"[Ll]oaded checkpoint {re.escape(str(interval))} .*@ {3 * INTERVAL} "
                     "updates", resumed)
    assert re.search(rf"num_updates {TOTAL}\b", resumed)
    assert _valid_losses(resumed)[-1] == _valid_losses(log)[-1]
    _assert_same_model(tmp_path / "checkpoint_last.pt", done / "checkpoint_last.pt")


def test_a_resume_after_the_first_epoch_ends_bit_exact(uninterrupted, tmp_path):
    """Issue 57: fairseq orders the examples of its batches with the seed of the epoch in which
    it builds the iterator: an uninterrupted run builds it in epoch 1, a resume in the epoch it
    resumes in, and trained on other batches from there (2 of 89 tensors of this transformer
    equal after a resume in epoch 2). With the plug-in (compat 10) a resume from the end of
    epoch 1 ends bit-exact where the uninterrupted run ends; the mid-epoch-2 resume is the
    test above; and so does fairseq's own transformer, resumed in the middle of epoch 2."""
    data, done, log = uninterrupted
    shutil.copy(done / "checkpoint1.pt", tmp_path / "checkpoint_last.pt")
    _, resumed = _train(data, tmp_path)
    assert re.search(r"[Ll]oaded checkpoint .*checkpoint_last\.pt \(epoch 2 @ 9 updates\)",
                     resumed)
    assert _valid_losses(resumed)[-1] == _valid_losses(log)[-1]
    _assert_same_model(tmp_path / "checkpoint_last.pt", done / "checkpoint_last.pt")

    stock, resumed_stock = tmp_path / "stock", tmp_path / "stock_resumed"
    _, stock_log = _train(data, stock, flags=STOCK)
    resumed_stock.mkdir()
    shutil.copy(stock / MID_EPOCH_2, resumed_stock / "checkpoint_last.pt")
    _, resumed = _train(data, resumed_stock, flags=STOCK)
    assert re.search(rf"@ {3 * INTERVAL} updates", resumed)
    assert _valid_losses(resumed)[-1] == _valid_losses(stock_log)[-1]
    _assert_same_model(resumed_stock / "checkpoint_last.pt", stock / "checkpoint_last.pt")


def test_nothing_to_fall_back_to_and_an_explicit_restore_file_are_errors(uninterrupted, tmp_path):
    data, done, _ = uninterrupted
    (tmp_path / "checkpoint_last.pt").write_bytes(b"")
    code, log = _train(data, tmp_path, check=False)
    assert code != 0
    assert "checkpoint_last.pt: the checkpoint file is empty" in log
    assert "so there is nothing to resume from: move" in log
    assert "weights_only=False" not in log
    code, log = run_tool("fairseq-train", data, *TRAIN, "--save-dir", tmp_path / "other",
                         "--restore-file", tmp_path / "checkpoint_last.pt", check=False)
    assert code != 0 and f"{tmp_path / 'checkpoint_last.pt'}: the checkpoint file is empty" in log
    assert "resuming from" not in log


def test_a_failed_copy_leaves_no_torn_checkpoint_best(tmp_path, monkeypatch):
    """fairseq-train copies its first file of a save to checkpoint_best.pt and
    checkpoint_last.pt; with the plug-in, a full disk during that copy leaves the previous
    file whole and raises one line naming it and the cause (issue 38, item 3)."""
    import errno
    import os

    import fairseq_shared  # noqa: F401  (compat)
    from fairseq import checkpoint_utils

    from fairseq_shared.checkpoint_io import CheckpointError

    first, best = tmp_path / "checkpoint_1_5.pt", tmp_path / "checkpoint_best.pt"
    first.write_bytes(b"new " * 1000)
    best.write_bytes(b"old best")
    assert checkpoint_utils.PathManager.copy(str(first), str(tmp_path / "last.pt"), True)
    assert (tmp_path / "last.pt").read_bytes() == first.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CheckpointError, match=rf"{best}: cannot write it: No space left on "
                       r"device \(ENOSPC\)"):
        checkpoint_utils.PathManager.copy(str(first), str(best), overwrite=True)
    assert best.read_bytes() == b"old best"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint_1_5.pt", "checkpoint_best.pt", "last.pt"]
    assert checkpoint_utils.PathManager.isfile(str(best))  # the rest is fairseq's PathManager


def test_fairseq_generate_names_a_bad_checkpoint(uninterrupted, tmp_path):
    data, done, _ = uninterrupted
    whole = (done / "checkpoint_last.pt").read_bytes()
    bad = tmp_path / "cut.pt"
    bad.write_bytes(whole[: len(whole) // 3])
    code, out = run_tool("fairseq-generate", data, "--user-dir", USER_DIR, "--path", bad,
                         "--cpu", "--beam", "1", check=False)
    assert code != 0
    assert f"{bad}: the checkpoint file is truncated or corrupt" in out
    assert "weights_only=False" not in out
    # one line from the plug-in's excepthook, not fairseq's traceback (compat 8.)
    assert "Traceback" not in out and "fairseq-generate: error: " in out
    code, out = run_tool("fairseq-generate", data, "--user-dir", USER_DIR, "--path", bad,
                         "--cpu", "--beam", "1", check=False, env={**ENV, "FAIRSEQ_SHARED_DEBUG": "1"})
    assert code != 0 and "Traceback" in out


def test_rerunning_a_finished_command_trains_nothing(uninterrupted, tmp_path):
    """Issue 57, silent 9: fairseq checks --max-update only after an update, so the same
    command run again trained one more and replaced checkpoint_last.pt; with the plug-in it
    stops at once, status 0, the checkpoint byte-identical. A higher --max-update trains on."""
    data, done, _ = uninterrupted
    shutil.copy(done / "checkpoint_last.pt", tmp_path / "checkpoint_last.pt")
    before = (tmp_path / "checkpoint_last.pt").read_bytes()
    _, log = _train(data, tmp_path)
    assert (f"the restored checkpoint is at update {TOTAL}, --max-update {TOTAL} is reached: "
            "nothing to train") in log
    assert "num_updates" not in log.split("nothing to train")[1]
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt"]
    _, log = run_tool("fairseq-train", data, *TRAIN[:-1], str(TOTAL + 1), "--save-dir",
                      tmp_path)
    assert re.search(rf"num_updates {TOTAL + 1}\b", log)


def test_a_non_finite_checkpoint_last_stops_the_resume_naming_it(uninterrupted, tmp_path):
    """A NaN in checkpoint_last.pt (a whole file, its CRCs valid: a diverged or corrupted
    model) is named in one line; the resume does not fall back to an older checkpoint as it
    does for a torn file (issue 57)."""
    data, done, _ = uninterrupted
    shutil.copy(done / MID_EPOCH_2, tmp_path / MID_EPOCH_2)
    state = torch.load(done / "checkpoint_last.pt", weights_only=True)
    state["model"]["encoder.embed_tokens.weight"][0, 0] = float("nan")
    torch.save(state, tmp_path / "checkpoint_last.pt")
    code, log = _train(data, tmp_path, check=False)
    assert code == 1 and "Traceback" not in log and "resuming from" not in log
    assert (f"fairseq-train: error: {tmp_path / 'checkpoint_last.pt'}: cannot be used: its tensor "
            "encoder.embed_tokens.weight holds 1 non-finite value(s)") in log
