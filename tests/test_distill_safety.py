"""Distillation under kills, a second run, a moved or corrupted output and bad flags (issue 57):
a run killed at any moment resumes to the bytes of an uninterrupted run; a second run into the
same ``--out`` is refused while the first holds it; a changed corpus or a NaN teacher is one
line."""

import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from fairseq_shared.cli.distill import main
from fairseq_shared.distill.run import distill
from helpers_data import ENV, data_bin, trained_checkpoints
from test_distill import SETTINGS, SHARD, _fails, ct2_run, ensemble_run  # noqa: F401 (fixtures)

torch.set_num_threads(1)


def _args(teachers, data, out, shard=SHARD):
    return ["--teacher", *map(str, teachers), "--data", str(data), "--out", str(out),
            "--shard-size", str(shard)]


def _start(args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "fairseq_shared.cli.distill", *args],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            **kwargs)


def _wait_for(proc, found, what):
    """Poll until ``found()`` is true; the process must still be running then."""
    deadline = time.time() + 240
    while not found() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    assert found() and proc.poll() is None, f"the run ended before {what}"


def _kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _same_corpus(out, reference):
    names = ["text/train.src", "text/train.tgt"] + [
        f"bin/{n}" for n in sorted(os.listdir(reference / "bin")) if not n.startswith(".")]
    for name in names:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_kills_at_several_moments_a_second_run_a_moved_out_and_a_corrupted_export(
        ct2_run, tmp_path, tmp_path_factory, capsys):
    """Killed during the teacher's export (a second run refused meanwhile), between shards and
    while assembling; then moved, its export corrupted, and resumed: the corpus of the
    uninterrupted run, byte for byte."""
    teacher, reference, manifest = ct2_run
    data = data_bin(tmp_path_factory)
    out = tmp_path / "out"
    args = _args([teacher], data, out, shard=1)  # 160 shards: a kill lands between two

    first = _start(args)
    _wait_for(first, lambda: glob.glob(str(out / ".teacher_export.export-staging-*")),
              "the teacher's export")
    first.send_signal(signal.SIGSTOP)  # holds the lock, stopped inside the export
    try:
        err = _fails(args, capsys)
        assert err.startswith(f"distill: error: --out {out}: another distill run is writing "
                              f"into it (it holds {out / '.lock'})"), err
    finally:
        _kill(first)
    assert not (out / "teacher_export").exists()
    assert json.loads((out / "state.json").read_text())["engine"] is None

    second = _start(args)
    _wait_for(second, lambda: (out / "shards" / "train.00005.txt").exists(), "its sixth shard")
    _kill(second)
    assert len(os.listdir(out / "shards")) < 160

    victim = tmp_path / "victim.txt"  # links planted where the run writes: never written through
    victim.write_text("the user's\n")
    (out / "text").mkdir()
    (out / "text" / "train.tgt.tmp").symlink_to(victim)
    (out / "text" / "train.src").symlink_to(victim)
    third = _start(args)
    _wait_for(third, lambda: (out / "text" / "train.src").exists(), "assembling the corpus")
    _kill(third)
    assert not (out / "manifest.json").exists()

    moved = tmp_path / "moved"
    out.rename(moved)
    model = moved / "teacher_export" / "ct2" / "model.bin"
    blob = bytearray(model.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    model.write_bytes(bytes(blob))
    assert main(_args([teacher], data, moved, shard=1)) == 0
    assert "exporting the teacher again" in capsys.readouterr().out
    resumed = json.loads((moved / "manifest.json").read_text())
    assert resumed["engine"] == "ct2" and resumed["train_sha256"] == manifest["train_sha256"]
    _same_corpus(moved, reference)
    assert victim.read_text() == "the user's\n"
    assert not (moved / "text" / "train.src").is_symlink()


def test_a_corpus_rebuilt_in_place_is_refused_not_reported_done(ct2_run, tmp_path,
                                                                tmp_path_factory, capsys):
    teacher, _, _ = ct2_run
    corpus = shutil.copytree(data_bin(tmp_path_factory), tmp_path / "bin")
    out = tmp_path / "out"
    distill([str(teacher)], str(corpus), str(out), SETTINGS, shard_size=80)
    assert main(_args([teacher], corpus, out, shard=80)) == 0  # unchanged: done already
    assert "done already" in capsys.readouterr().out
    # rebuilt with the same dictionaries and other training sentences
    for name in ("train.src-tgt.src.bin", "train.src-tgt.src.idx"):
        shutil.copy(corpus / name.replace("train", "valid"), corpus / name)
    err = _fails(_args([teacher], corpus, out, shard=80), capsys)
    assert err.startswith(f"distill: error: --out {out} holds a distillation of another corpus "
                          f"than --data {corpus} (or of it before it was rebuilt: "
                          "train.src-tgt.src.bin, train.src-tgt.src.idx differ)"), err
    # rebuilt with another dictionary: the dictionary check speaks first
    lines = (corpus / "dict.src.txt").read_text().splitlines()
    (corpus / "dict.src.txt").write_text("\n".join(lines[1:] + ["zz 1"]) + "\n")
    err = _fails(_args([teacher], corpus, tmp_path / "new", shard=80), capsys)
    assert f"--data {corpus}: dict.src.txt differs from the dictionary" in err


@pytest.mark.parametrize("threads", ["0", "-3"])
def test_threads_out_of_range_is_one_line_and_writes_nothing(threads, tmp_path,
                                                             tmp_path_factory, capsys):
    teacher = trained_checkpoints(tmp_path_factory) / "checkpoint_last.pt"
    out = tmp_path / "out"
    err = _fails(_args([teacher], data_bin(tmp_path_factory), out) + ["--threads", threads],
                 capsys)
    assert err == (f"distill: error: --threads {threads}: must be an integer >= 1 "
                   "(--debug shows the traceback)")
    assert not out.exists()


def test_a_teacher_with_a_nan_is_refused_naming_the_file_and_the_tensor(tmp_path,
                                                                        tmp_path_factory, capsys):
    from fairseq_shared import checkpoint_io

    state = checkpoint_io.load_raw(str(trained_checkpoints(tmp_path_factory) / "checkpoint3.pt"))
    name = "decoder.layers.0.fc1.weight"
    state["model"][name][0, 0] = float("nan")
    bad = tmp_path / "nan.pt"
    torch.save(state, bad)
    out = tmp_path / "out"
    err = _fails(_args([bad], data_bin(tmp_path_factory), out), capsys)
    # the one loader's check (checkpoint_io.read), as for every tool
    assert f"{bad}: cannot be used: its tensor {name} holds 1 non-finite value(s)" in err, err
    assert not out.exists()


def test_a_full_disk_names_the_file_it_could_not_write(ensemble_run, tmp_path, tmp_path_factory):
    """A file-size limit (EFBIG, as ENOSPC: an error of the write, which names no file) below
    the size of the distilled text: one line naming that file."""
    teachers, reference, _ = ensemble_run
    limit = (reference / "text" / "train.src").stat().st_size - 1
    assert limit > max(os.path.getsize(p) for p in glob.glob(str(reference / "shards" / "*")))
    assert limit > (reference / "state.json").stat().st_size + 300  # its paths differ a little

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "fairseq_shared.cli.distill",
                           *_args(teachers, data_bin(tmp_path_factory), out)],
                          env=ENV, capture_output=True, text=True, preexec_fn=small_files)
    assert proc.returncode == 1, proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert err[-1].startswith(f"distill: error: {out / 'text' / 'train.src'}: cannot write it: "
                              "File too large (EFBIG); nothing was replaced"), err[-1]
    assert not (out / "text" / "train.src").exists()
    assert main(_args(teachers, data_bin(tmp_path_factory), out)) == 0  # resumes
    _same_corpus(out, reference)


def test_a_teacher_whose_training_data_is_gone_needs_trained_on(tmp_path, tmp_path_factory,
                                                                capsys):
    """Another corpus's dictionary of the same size passed the row count and distilled
    garbage; now the dictionaries are compared with the ones named by --trained-on."""
    from fairseq_shared import checkpoint_io

    data = data_bin(tmp_path_factory)
    state = checkpoint_io.load_raw(str(trained_checkpoints(tmp_path_factory) / "checkpoint3.pt"))
    state["cfg"]["task"]["data"] = str(tmp_path / "gone" / "bin")
    moved = tmp_path / "moved.pt"
    torch.save(state, moved)
    other = shutil.copytree(data, tmp_path / "other")  # same sizes, the symbols in another order
    for name in ("dict.src.txt", "dict.tgt.txt"):
        lines = (other / name).read_text().splitlines()
        (other / name).write_text("\n".join(lines[::-1]) + "\n")
    out = tmp_path / "out"
    err = _fails(_args([moved], other, out), capsys)
    assert err.startswith(f"distill: error: {moved}: its training data directory "
                          f"{tmp_path / 'gone' / 'bin'} no longer holds dict.src.txt, so --data "
                          f"{other}'s cannot be checked against it; pass --trained-on DIR"), err
    err = _fails(_args([moved], other, out) + ["--trained-on", str(data)], capsys)
    assert f"--data {other}: dict.src.txt differs from the dictionary {data / 'dict.src.txt'}" in err
    err = _fails(_args([moved], data, out) + ["--trained-on", str(tmp_path)], capsys)
    assert f"--trained-on {tmp_path}: no dict.src.txt" in err
    assert not out.exists()
    assert main(_args([moved], data, out, shard=80) + ["--trained-on", str(data)]) == 0
    assert json.loads((out / "manifest.json").read_text())["distilled_sentences"] == 160
