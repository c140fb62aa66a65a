"""Sequence-level distillation (issue 35, item 1): the distilled targets are the chosen engine's
own hypotheses, a killed run resumes to the same corpus, bad input is one line."""

import filecmp
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from fairseq.data import data_utils

from fairseq_shared.cli.distill import main
from fairseq_shared.distill.run import distill
from helpers_data import ENV, USER_DIR, data_bin, run_tool, shared_build, trained_checkpoints

torch.set_num_threads(1)
SETTINGS = dict(beam=4, lenpen=1.0, max_len_a=1.2, max_len_b=10)
SHARD = 10  # 160 training sentences: 16 shards


def targets(out, split="train"):
    """The target ids (EOS included) of the distilled corpus's ``split``."""
    from fairseq.data import Dictionary

    d = Dictionary.load(str(out / "bin" / "dict.tgt.txt"))
    data = data_utils.load_indexed_dataset(str(out / "bin" / f"{split}.src-tgt.tgt"), d)
    return [data[i].tolist() for i in range(len(data))], d


def _shared_distillation(tmp_path_factory, name, teachers):
    """(out, manifest) of distilling TEACHERS into the run-wide artefact NAME, done once per
    pytest run (this module and test_distill_safety.py read it; tests copy before writing)."""
    with shared_build(tmp_path_factory, name) as (root, complete):
        if not complete:
            root.mkdir()
            distill(teachers, str(data_bin(tmp_path_factory)), str(root / "out"), SETTINGS,
                    shard_size=SHARD)
    return root / "out", json.loads((root / "out" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def ct2_run(tmp_path_factory):
    teacher = trained_checkpoints(tmp_path_factory) / "checkpoint_last.pt"
    return (teacher, *_shared_distillation(tmp_path_factory, "distill_ct2", [str(teacher)]))


@pytest.fixture(scope="module")
def ensemble_run(tmp_path_factory):
    saved = trained_checkpoints(tmp_path_factory)
    teachers = [str(saved / "checkpoint2.pt"), str(saved / "checkpoint3.pt")]
    return (teachers, *_shared_distillation(tmp_path_factory, "distill_ensemble", teachers))


def test_a_single_teacher_decodes_with_ctranslate2_and_its_targets_are_its_translations(
        ct2_run, tmp_path_factory):
    from fairseq.data import Dictionary

    from fairseq_shared.export.ct2 import CT2Decoder
    from fairseq_shared.export.verify import max_len
    from fairseq_shared.tools.checkpoints import Takes, open_checkpoint
    from fairseq_shared.models import architectures

    teacher, out, manifest = ct2_run
    data = data_bin(tmp_path_factory)
    assert manifest["engine"] == "ct2", manifest["engine_reason"]
    assert "passed its check on 16 valid sentences" in manifest["engine_reason"]  # all 16
    assert manifest["settings"] == SETTINGS and manifest["distilled_sentences"] == 160
    assert len(manifest["teachers"][0]["sha256"]) == 64
    text = (out / "text" / "train.tgt").read_bytes()
    assert manifest["train_sha256"] == hashlib.sha256(text).hexdigest()
    assert 0 <= manifest["teacher_valid"]["bleu"] <= 100
    loaded = open_checkpoint(str(teacher), "test", Takes("test", (architectures.MODEL,)),
                             data=str(data))
    task = loaded.task
    task.load_dataset("train")
    dataset = task.dataset("train")
    d = Dictionary.load(str(data / "dict.tgt.txt"))
    ct2 = CT2Decoder(str(out / "teacher_export" / "ct2"), d, d)
    distilled, _ = targets(out)
    for i in range(len(dataset)):  # CTranslate2's own translation, one sentence at a time
        src = dataset[i]["source"]
        limit = max_len(loaded.model, len(src), SETTINGS["max_len_a"], SETTINGS["max_len_b"])
        (ids, _), = ct2.translate([src], SETTINGS["beam"], SETTINGS["lenpen"], limit)
        assert distilled[i] == ids, i
    # the sources are the corpus's; valid and test keep their real references
    sources = data_utils.load_indexed_dataset(str(out / "bin" / "train.src-tgt.src"), d)
    assert [sources[i].tolist() for i in range(160)] == [dataset.src[i].tolist()
                                                        for i in range(160)]
    for name in ("valid.src-tgt.tgt.bin", "test.src-tgt.src.idx", "dict.src.txt"):
        assert filecmp.cmp(out / "bin" / name, data / name, shallow=False), name


def _generate(data, teachers, subset="train"):
    """fairseq-generate's hypotheses (token strings, by id), one sentence a batch."""
    _, text = run_tool("fairseq-generate", data, "--path", ":".join(teachers), "--user-dir",
                       USER_DIR, "--gen-subset", subset, "--beam", "4", "--lenpen", "1.0",
                       "--max-len-a", "1.2", "--max-len-b", "10", "--batch-size", "1", "--cpu")
    hyps = {}
    for line in text.splitlines():
        if line.startswith("H-"):
            sid, _, tokens = line[2:].split("\t")
            hyps[int(sid)] = tokens
    return hyps


def test_an_ensemble_decodes_with_fairseq_and_its_targets_are_fairseq_generates(
        ensemble_run, tmp_path_factory):
    teachers, out, manifest = ensemble_run
    data = data_bin(tmp_path_factory)
    assert manifest["engine"] == "fairseq"
    assert manifest["engine_reason"].startswith("an ensemble of 2 checkpoints")
    hyps = _generate(data, teachers)
    assert len(hyps) == 160
    lines = (out / "text" / "train.tgt").read_text().splitlines()
    assert lines == [hyps[i] for i in range(160)]
    distilled, d = targets(out)
    assert distilled == [d.encode_line(hyps[i], add_if_not_exist=False).tolist()
                         for i in range(160)]


def test_a_killed_run_resumes_and_gives_the_same_corpus(ensemble_run, tmp_path,
                                                        tmp_path_factory):
    teachers, reference, _ = ensemble_run
    data = data_bin(tmp_path_factory)
    out = tmp_path / "out"
    args = ["--teacher", *teachers, "--data", str(data), "--out", str(out), "--shard-size",
            str(SHARD)]
    proc = subprocess.Popen([sys.executable, "-m", "fairseq_shared.cli.distill", *args],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    third = out / "shards" / "train.00002.txt"
    deadline = time.time() + 240
    while not third.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    shards = os.listdir(out / "shards")
    assert third.exists() and len(shards) < 16 and not (out / "manifest.json").exists()
    assert main(args) == 0
    assert sorted(os.listdir(out / "shards")) == sorted(os.listdir(reference / "shards"))
    for name in ["text/train.src", "text/train.tgt"] + [
            f"bin/{n}" for n in os.listdir(reference / "bin") if n.endswith((".bin", ".idx"))]:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def _fails(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("distill: error: "), err
    return err


def test_a_dictionary_that_differs_from_the_teachers_is_refused(tmp_path, tmp_path_factory,
                                                                 capsys):
    teacher = trained_checkpoints(tmp_path_factory) / "checkpoint_last.pt"
    data = shutil.copytree(data_bin(tmp_path_factory), tmp_path / "bin")
    lines = (data / "dict.src.txt").read_text().splitlines()
    (data / "dict.src.txt").write_text("\n".join(lines[1:] + ["zz 1"]) + "\n")
    err = _fails(["--teacher", str(teacher), "--data", str(data), "--out", str(tmp_path / "o")],
                 capsys)
    assert f"--data {data}: dict.src.txt differs from the dictionary" in err
    assert "first difference at line 1" in err and not (tmp_path / "o").exists()


def test_a_language_model_checkpoint_is_refused(tmp_path, tmp_path_factory, capsys):
    from helpers_checkpoint import save_checkpoint
    from helpers_lm import TINY_LM, build_lm, parse_lm_args

    flags = TINY_LM + ["--decoder-layers", "2", "--decoder-unique-layers", "1"]
    lm, _ = build_lm("transformer_lm_cycle_rev", flags)
    path = save_checkpoint(tmp_path / "lm.pt", parse_lm_args("transformer_lm_cycle_rev", flags), lm)
    err = _fails(["--teacher", str(path), "--data", str(data_bin(tmp_path_factory)),
                  "--out", str(tmp_path / "o")], capsys)
    assert err.endswith(f"{path} is a language model checkpoint; distill needs a translation "
                        "checkpoint (--debug shows the traceback)")


def test_an_output_directory_with_the_input_or_another_teachers_files_is_refused(
        ensemble_run, tmp_path_factory, capsys):
    saved = trained_checkpoints(tmp_path_factory)
    teacher = saved / "checkpoint_last.pt"
    data = data_bin(tmp_path_factory)
    err = _fails(["--teacher", str(teacher), "--data", str(data), "--out", str(saved)], capsys)
    assert f"--out {saved} holds the input teacher {teacher}" in err
    err = _fails(["--teacher", str(teacher), "--data", str(data), "--out", str(data.parent)],
                 capsys)
    assert f"holds the input --data {data}" in err
    _, out, _ = ensemble_run
    err = _fails(["--teacher", str(teacher), "--data", str(data), "--out", str(out),
                  "--shard-size", str(SHARD)], capsys)
    assert f"--out {out} holds another teacher's distillation ({saved / 'checkpoint2.pt'}" in err


def test_sources_longer_than_the_teachers_positions_are_skipped_and_counted(
        tmp_path, tmp_path_factory):
    from fairseq_shared import checkpoint_io

    data = data_bin(tmp_path_factory)
    state = checkpoint_io.load_raw(str(trained_checkpoints(tmp_path_factory) / "checkpoint3.pt"))
    model_cfg = state["cfg"]["model"]
    if isinstance(model_cfg, dict):
        model_cfg["max_source_positions"] = 7
    else:
        model_cfg.max_source_positions = 7
    short = tmp_path / "short.pt"
    torch.save(state, short)
    manifest = distill([str(short)], str(data), str(tmp_path / "out"), SETTINGS, shard_size=80)
    sizes = [len(l.split()) + 1 for l in (data.parent / "train.src").read_text().splitlines()]
    too_long = sum(n > 7 for n in sizes)
    assert 0 < too_long < 160
    assert manifest["skipped_source_too_long"] == {"sentences": too_long,
                                                   "max_source_positions": 7}
    assert manifest["distilled_sentences"] == 160 - too_long == len(targets(tmp_path / "out")[0])
    assert manifest["engine"] == "fairseq"  # the export's check sentences are too long too
    assert "over the model's --max-source-positions 7" in manifest["engine_reason"]
