"""Export to a plain fairseq transformer and to CTranslate2 (issue 10, item 1)."""

import json
import os
import re
import shutil

import pytest
import torch
from fairseq.tasks.translation import TranslationTask

from fairseq_shared.export.api import export
from fairseq_shared.export.plain import ExportError
from helpers_data import data_bin, generate_in_process, run_tool, trained_checkpoints, USER_DIR
from helpers_model import TINY, parse_args

torch.set_num_threads(1)
#: a deep shared encoder under a shallow decoder: 12 layers over 6 sets by cycle_rev, 1 decoder
#: layer (the budget's cycle_rev_4L_dec1)
#: what every command of the package adds to its one-line error (cli/errors.py)
DEBUG = " (--debug shows the traceback)"
DEEP_SHARED_ENCODER = ["--encoder-layers", "12", "--encoder-share-strategy", "cycle_rev",
                       "--encoder-unique-layers", "6", "--decoder-layers", "1"]


def save_random_checkpoint(path, data, flags, seed=1):
    """A fairseq checkpoint (legacy layout) of an untrained model built in-process."""
    args = parse_args("shared_transformer", TINY + list(flags))
    args.data = str(data)
    task = TranslationTask.setup_task(args)
    torch.manual_seed(seed)
    model = task.build_model(args)
    history = [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                "lr_scheduler_state": {}, "num_updates": 0}]
    torch.save({"args": args, "cfg": None, "model": model.state_dict(),
                "optimizer_history": history, "extra_state": {}}, path)
    return path


def _export_cli(*argv):
    """The export's command line; its exit status (an error exits through SystemExit, as in
    every command of the package: cli/errors.py)."""
    from fairseq_shared.cli.export import main

    try:
        return main([str(a) for a in argv])
    except SystemExit as stop:
        return stop.code


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    checkpoint = trained_checkpoints(tmp_path_factory) / "checkpoint_last.pt"
    out = tmp_path_factory.mktemp("export")
    report = export(str(checkpoint), str(out), ct2=True, quantization="int8",
                    data=str(data_bin(tmp_path_factory)), sentences=12)
    return checkpoint, out, report


def test_trained_cycle_rev_exports_with_identical_hypotheses(exported):
    _, out, report = exported
    assert report["ok"] and report["kind"] == "translation"
    verify = report["verify"]
    for key, tolerance in (("fairseq_plain_vs_shared", 1e-6), ("ct2_float32_vs_fairseq", 1e-4)):
        assert verify[key]["sentences"] == 12 == verify[key]["model_agrees"]
        assert verify[key]["search"]["identical"] == 12, verify[key]
        assert verify[key]["tolerance"] == tolerance and verify[key]["max_abs_diff"] <= tolerance
    int8 = verify["ct2_int8_vs_fairseq"]
    assert int8["required"] is False and int8["tolerance"] is None
    assert 1e-4 < int8["max_abs_diff"] < 1.0  # quantized: reported, not required
    assert json.loads((out / "export.json").read_text())["ok"]


@pytest.fixture(scope="module")
def weak_model(tmp_path_factory):
    """A near-untrained cycle_rev (25 updates): beam searches of two engines differ on a few
    of its 40 training sentences while the models' scores agree."""
    from helpers_data import TINY_ARCH, TINY_TRAIN

    data = data_bin(tmp_path_factory)
    save_dir = tmp_path_factory.mktemp("weak")
    run_tool("fairseq-train", data, *TINY_ARCH, *TINY_TRAIN, "--max-update", "25", "--seed", "1",
             "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-save-optimizer-state")
    return save_dir / "checkpoint_last.pt", data


def test_weak_model_passes_and_reports_its_search_differences(weak_model, tmp_path):
    checkpoint, data = weak_model
    report = export(str(checkpoint), str(tmp_path), ct2=True, data=str(data), subset="train",
                    sentences=40)
    assert report["ok"]
    check = report["verify"]["ct2_float32_vs_fairseq"]
    assert check["model_agrees"] == 40 and check["max_abs_diff"] < 1e-4
    search = check["search"]
    assert search["different"] >= 1, search  # a real search difference, reported
    assert search["identical"] + search["different"] == 40
    assert search["different"] == (search["candidate_higher"] + search["reference_higher"]
                                   + search["tied"])
    examples = search["examples"]
    assert all(e["reference"] != e["candidate"] for e in examples)
    if search["different"] <= len(examples):  # every difference listed: the counts are theirs
        scores = [e["reference_model_scores"] for e in examples]
        assert search["reference_higher"] == sum(a > b + 1e-4 for a, b in scores)
        assert search["candidate_higher"] == sum(b > a + 1e-4 for a, b in scores)


def test_a_corrupted_export_fails_and_names_the_sentence(weak_model, tmp_path):
    """One weight of the CTranslate2 model changed: the check fails, naming sentences."""
    from fairseq_shared.export import ct2 as ct2_lib
    from fairseq_shared.export.verify import verify_translation
    from fairseq_shared.export import kinds
    from fairseq_shared.export.plain import load_shared, plain_checkpoint, write_inputs
    from fairseq_shared.export.verify import summary_line

    checkpoint, data = weak_model
    loaded = load_shared(str(checkpoint), str(data))
    write_inputs(loaded, str(tmp_path), None)
    state = plain_checkpoint(loaded, str(tmp_path))
    weight = state["model"]["decoder.layers.1.fc2.weight"].clone()
    weight[3, 5] += 0.5
    state["model"]["decoder.layers.1.fc2.weight"] = weight
    corrupt = ct2_lib.convert(kinds.of(loaded.kind).legacy_checkpoint(state), str(tmp_path),
                              str(tmp_path / "ct2"))
    task = loaded.task
    task.load_dataset("test")
    dataset = task.dataset("test")
    settings = dict(beam=4, lenpen=1.0, max_len_a=0.0, max_len_b=200)
    result = verify_translation(loaded.model, loaded.model, task, dataset, list(range(12)),
                                settings, {"float32": corrupt})["ct2_float32_vs_fairseq"]
    assert not result["ok"] and result["different"] == 12 - result["model_agrees"] > 0
    first = result["model_differs"][0]
    assert first["max_abs_diff"] > 1e-3
    assert first["source"] == task.source_dictionary.string(dataset[first["id"]]["source"])
    line = summary_line("ct2_float32_vs_fairseq", result)
    assert f"model DIFFERS on {result['different']}/12 sentences" in line
    assert f"first: sentence {first['id']} \"{first['source']}\"" in line


def test_plain_checkpoint_is_fairseqs_transformer_in_plain_types(exported):
    _, out, _ = exported
    path = out / "checkpoint.pt"
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []
    state = torch.load(path, weights_only=True)
    assert state["args"] is None and state["cfg"]["model"]["arch"] == "transformer"
    assert not [k for k in state["cfg"]["model"] if "share_strategy" in k or k.startswith("san_")]
    keys = set(state["model"])
    assert not [k for k in keys if "sharing" in k]
    assert {f"decoder.layers.{i}.fc1.weight" for i in range(4)} <= keys  # all 4 layers
    # tied layers (cycle_rev 1 2 2 1) still share storage: written once
    m = state["model"]
    assert m["decoder.layers.3.fc1.weight"].data_ptr() == m["decoder.layers.0.fc1.weight"].data_ptr()
    assert (out / "dict.src.txt").exists() and (out / "dict.tgt.txt").exists()


def test_ct2_model_stores_tied_weights_once(exported):
    _, _, report = exported
    size = report["ct2_float32"]
    overhead = size["model_bin_bytes"] - size["unique_fp32_weight_bytes"] - size["position_table_bytes"]
    # names, config and vocabulary: a few KiB whatever the model size (1.0321x at this toy
    # size, where the weights are 175 KiB); an expanded 4-layer copy would add 25 KiB+
    assert 0 <= overhead < 12_000
    assert report["ct2_int8"]["model_bin_bytes"] < 0.7 * size["model_bin_bytes"]


def _hypotheses(output):
    return sorted(re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", output, re.M))


def test_stock_fairseq_generate_without_user_dir_gives_the_same_translations(
        exported, tmp_path_factory):
    checkpoint, out, _ = exported
    data = data_bin(tmp_path_factory)
    common = ["--beam", "4", "--batch-size", "4", "--cpu", "--required-batch-size-multiple", "1"]
    shared = generate_in_process(data, "--path", checkpoint, "--user-dir", USER_DIR, *common)
    _, plain = run_tool("fairseq-generate", data, "--path", out / "checkpoint.pt", *common)
    assert len(_hypotheses(shared)) == 12
    assert _hypotheses(plain) == _hypotheses(shared)


@pytest.mark.parametrize("flags", [
    ["--encoder-layers", "5", "--decoder-layers", "5", "--encoder-share-strategy", "cycle_rev",
     "--encoder-unique-layers", "3", "--decoder-share-strategy", "sequence",
     "--decoder-unique-layers", "3"],
    ["--encoder-layers", "3", "--decoder-layers", "4", "--encoder-share-strategy", "universal",
     "--decoder-share-strategy", "1,2,2,1", "--decoder-share-scope", "attn",
     "--encoder-share-scope", "ffn"],
    DEEP_SHARED_ENCODER,  # issue 35: 12 encoder layers over 6 sets, 1 decoder layer
])
def test_untrained_models_of_other_maps_and_scopes_export_exactly(flags, tmp_path, tmp_path_factory):
    """Untrained weights: long, arbitrary outputs up to the length limit (CTranslate2's and
    fairseq's limits and minimum lengths must agree)."""
    data = data_bin(tmp_path_factory)
    path = save_random_checkpoint(tmp_path / "random.pt", data, flags)
    report = export(str(path), str(tmp_path / "out"), ct2=True, data=str(data),
                    sentences=6, max_len_b=9)
    for key in ("fairseq_plain_vs_shared", "ct2_float32_vs_fairseq"):
        assert report["verify"][key]["ok"], report["verify"][key]
        assert report["verify"][key]["model_agrees"] == 6


def test_san_model_is_refused_saying_why(tmp_path, tmp_path_factory):
    data = data_bin(tmp_path_factory)
    path = save_random_checkpoint(tmp_path / "san.pt", data, [
        "--decoder-layers", "4", "--san-self-policy", "1,3", "--san-cross-policy", "2,2"])
    with pytest.raises(ExportError) as err:
        export(str(path), str(tmp_path / "out"), ct2=True, data=str(data))
    message = str(err.value)
    assert "cannot export a SAN model (--san-self-policy 1,3, --san-cross-policy 2,2)" in message
    assert "neither fairseq's Transformer nor CTranslate2" in message


def test_cli_reports_and_refuses_bad_flags(exported, tmp_path, tmp_path_factory, capsys):
    checkpoint, _, _ = exported
    assert _export_cli(checkpoint, "--out", tmp_path, "--sentences", "3",
                       "--data", data_bin(tmp_path_factory)) == 0
    assert "fairseq_plain_vs_shared: model agrees on 3/3 sentences" in capsys.readouterr().out
    assert _export_cli(tmp_path / "missing.pt", "--out", tmp_path) == 2
    assert "no such checkpoint file" in capsys.readouterr().err
    for flag, value, allowed in (("--sentences", "-1", "an integer >= 0"),
                                 ("--beam", "0", "an integer >= 1"),
                                 ("--max-len-b", "-5", "an integer >= 1"),
                                 ("--max-len-a", "nan", "a finite number >= 0")):
        assert _export_cli(checkpoint, "--out", tmp_path / "x", flag, value) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"export: error: {flag} {value}: must be {allowed}" + (
            " (0: no verification)" if flag == "--sentences" else "") + DEBUG
    assert not (tmp_path / "x").exists()


def test_export_refuses_to_overwrite_its_inputs(exported, tmp_path, tmp_path_factory, capsys):
    """issue 20: ``--out`` the checkpoint's own directory replaced the training checkpoint."""
    import shutil

    checkpoint, _, _ = exported
    data = data_bin(tmp_path_factory)
    run = tmp_path / "run"
    run.mkdir()
    own = run / "checkpoint.pt"
    shutil.copy(checkpoint, own)
    before = own.read_bytes()
    assert _export_cli(own, "--out", run, "--sentences", "0", "--data", data) == 2
    err = capsys.readouterr().err
    assert f"the export would overwrite the input CHECKPOINT '{own}'" in err
    inner = run / "ct2"
    inner.mkdir()
    shutil.copy(checkpoint, inner / "best.pt")
    assert _export_cli(inner / "best.pt", "--out", run, "--ct2", "--sentences", "0") == 2
    assert f"would replace '{inner}', which holds the input CHECKPOINT" in capsys.readouterr().err
    dict_before = (data / "dict.src.txt").read_bytes()
    assert _export_cli(checkpoint, "--out", data, "--sentences", "0") == 2
    assert "would overwrite the dictionary dict.src.txt of --data" in capsys.readouterr().err
    assert own.read_bytes() == before and (data / "dict.src.txt").read_bytes() == dict_before
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pt", "ct2"]


def test_bench_export_writes_the_deployment_table(exported, tmp_path, tmp_path_factory):
    """The archived results/archive/export/bench_export.py end to end on the tiny trained model
    (results/archive/export/export.md was written by the same script for the main job's models)."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "results/archive/export/bench_export.py"
    spec = importlib.util.spec_from_file_location("bench_export", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    checkpoint, _, _ = exported
    out = tmp_path / "export.md"
    argv = [str(checkpoint), "--data", str(data_bin(tmp_path_factory)), "--out", str(out),
            "--work", str(tmp_path / "work"), "--sentences", "5", "--verify-sentences", "5",
            "--batch-sizes", "1,3", "--warmup", "0", "--repeats", "2"]
    assert bench.main(argv) == 0
    text = out.read_text()
    assert "python results/archive/export/bench_export.py " + " ".join(argv) in text
    result = json.loads((tmp_path / "export.json").read_text())
    rows = {r["engine"]: r for r in result["rows"]}
    assert set(rows) == {"fairseq", "ct2_float32", "ct2_int8"}
    # identical hypotheses (verified by the export) give identical scores
    assert rows["ct2_float32"]["bleu"] == rows["fairseq"]["bleu"]
    assert rows["ct2_float32"]["chrf"] == rows["fairseq"]["chrf"]
    assert rows["fairseq"]["vs_fairseq_b1"] == 1.0 == rows["fairseq"]["vs_fairseq_b3"]
    work = tmp_path / "work" / checkpoint.parent.name
    assert rows["ct2_float32"]["disk_bytes"] == (work / "ct2" / "model.bin").stat().st_size
    assert rows["fairseq"]["disk_bytes"] == (work / "checkpoint.pt").stat().st_size
    for r in rows.values():
        assert r["tok_s_b1"] > 0 and r["tok_s_b3"] > 0
        assert 0 < r["rss_model_mb"] < r["peak_rss_mb"]
        assert f"| {r['model']} | {r['engine']} | {r['bleu']:.2f} |" in text


# ---- the export owns its directory (issue 38, item 1) -------------------------------------------


def _hashes_match(out):
    from fairseq_shared.export.directory import file_hashes

    report = json.loads((out / "export.json").read_text())
    assert report["ok"] and report["sha256"] == file_hashes(str(out))
    assert report["plain_checkpoint"] == str(out / "checkpoint.pt")
    return report


def _nothing_beside(out):
    """No staging or moved-aside directory of an export is left beside ``out``."""
    return [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.export-")
            and not p.name.endswith("export-lock")] == []


def test_links_inside_out_are_caught_or_replaced_never_written_through(exported, tmp_path,
                                                                        tmp_path_factory, capsys):
    checkpoint, _, _ = exported
    data = data_bin(tmp_path_factory)
    x = tmp_path / "x.pt"
    x.write_bytes(checkpoint.read_bytes())
    out = tmp_path / "d"
    assert _export_cli(x, "--out", out, "--sentences", "0", "--data", data) == 0
    _hashes_match(out)
    (out / "checkpoint.pt").unlink()
    os.link(x, out / "checkpoint.pt")  # a hard link to the input
    before = x.read_bytes()
    assert _export_cli(x, "--out", out, "--sentences", "0", "--data", data) == 2
    assert (f"'{out / 'checkpoint.pt'}' is the same file as (a hard link) the input CHECKPOINT"
            in capsys.readouterr().err)
    assert x.read_bytes() == before
    other = tmp_path / "other.pt"
    other.write_bytes(b"not the export's")
    (out / "checkpoint.pt").unlink()
    os.symlink(other, out / "checkpoint.pt")
    assert _export_cli(x, "--out", out, "--sentences", "0", "--data", data) == 0
    assert other.read_bytes() == b"not the export's"
    assert not (out / "checkpoint.pt").is_symlink()
    _hashes_match(out)
    assert _nothing_beside(out)


def test_out_holding_anything_but_an_export_is_refused_and_leftovers_go(
        exported, tmp_path, tmp_path_factory, capsys):
    checkpoint, _, _ = exported
    data = data_bin(tmp_path_factory)
    out = tmp_path / "d"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "runs").mkdir()
    assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"export: error: --out {out}: holds notes.txt, runs/, not an earlier export "
                   "(no export.json); choose another --out, or pass --force to replace it whole"
                   + DEBUG)
    assert (out / "notes.txt").read_text() == "mine"
    assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data,
                       "--force") == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint.pt", "dict.src.txt", "dict.tgt.txt", "export.json"]
    assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data,
                       "--ct2") == 0  # an earlier export --ct2: its export.json lists ct2/
    assert (out / "ct2" / "model.bin").exists()
    assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 0
    assert not (out / "ct2").exists()  # replaced whole: nothing of the earlier export stays
    _hashes_match(out)
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert _export_cli(checkpoint, "--out", afile, "--sentences", "0") == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_a_concurrent_export_refuses_and_an_interrupted_one_leaves_the_previous(
        exported, tmp_path, tmp_path_factory, capsys, monkeypatch):
    import errno

    from fairseq_shared.export import api, directory

    checkpoint, _, _ = exported
    data = data_bin(tmp_path_factory)
    out = tmp_path / "d"
    assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 0
    previous = _hashes_match(out)
    with directory.locked(str(out)):  # another export holds it
        assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 2
    assert "another export into it is running" in capsys.readouterr().err
    (tmp_path / ".d.export-staging-killed").mkdir()  # a SIGKILLed export's staging directory

    def interrupted(*args, **kwargs):  # Ctrl-C right after checkpoint.pt is written
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(api, "load_plain", interrupted)
        with pytest.raises(KeyboardInterrupt):
            api.export(str(checkpoint), str(out), data=str(data), sentences=0)
    assert _hashes_match(out) == previous and _nothing_beside(out)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", full)
        assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("export: error: ") and "No space left on device (ENOSPC)" in err
    assert "\n" not in err and "Traceback" not in err
    assert _hashes_match(out) == previous and _nothing_beside(out)


def test_a_failed_check_moves_nothing_into_place(weak_model, tmp_path, monkeypatch):
    from fairseq_shared.export import api

    checkpoint, data = weak_model
    out = tmp_path / "d"
    monkeypatch.setattr(api, "_passed", lambda report: False)
    report = export(str(checkpoint), str(out), data=str(data), sentences=2)
    assert not report["ok"] and not out.exists() and _nothing_beside(out)


# ---- only what an earlier export lists is replaced (issue 57, data loss 1-2; tracebacks) ----------


def test_files_an_earlier_export_does_not_list_are_named_and_kept(exported, tmp_path,
                                                                  tmp_path_factory, capsys):
    """issue 57, data loss 1: a re-export deleted the user's notes beside an earlier export."""
    checkpoint, _, _ = exported
    data = data_bin(tmp_path_factory)
    out = tmp_path / "d"
    assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 0
    previous = _hashes_match(out)
    (out / "NOTES.md").write_text("mine")
    (out / "bench").mkdir()
    (out / "bench" / "run.txt").write_text("timings")
    assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"export: error: --out {out}: holds NOTES.md, bench/, which the earlier export "
                   "there does not list (its export.json), and the export replaces the directory "
                   "whole; move them out, choose another --out, or pass --force to replace it "
                   "whole" + DEBUG)
    assert (out / "NOTES.md").read_text() == "mine"
    assert (out / "bench" / "run.txt").read_text() == "timings"
    (out / "NOTES.md").unlink()
    shutil.rmtree(out / "bench")
    assert _hashes_match(out) == previous  # the earlier export untouched too
    assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 0


def test_a_file_beside_the_listed_ones_in_their_own_folder_is_unlisted(tmp_path):
    """A ``ct2/serving.yaml`` beside an earlier export's ``ct2/model.bin``; an empty folder."""
    from fairseq_shared.export.directory import unlisted

    (tmp_path / "ct2").mkdir()
    for name in ("ct2/model.bin", "ct2/serving.yaml", "export.json"):
        (tmp_path / name).write_text("x")
    (tmp_path / "empty").mkdir()
    assert unlisted(str(tmp_path), {"ct2/model.bin", "export.json"}) == [
        "ct2/serving.yaml", "empty/"]


def test_a_stray_export_json_is_no_export_to_replace(exported, tmp_path, tmp_path_factory, capsys):
    """issue 57, data loss 2: any directory with an export.json was replaced whole."""
    checkpoint, _, _ = exported
    data = data_bin(tmp_path_factory)
    for name, files in (("u", {"thesis.tex": "draft", "export.json": '{"plain_checkpoint": null}'}),
                        ("v", {"export.json": '{"plain_checkpoint": null, "sha256": {}}'})):
        out = tmp_path / name
        out.mkdir()
        for f, text in files.items():
            (out / f).write_text(text)
        assert _export_cli(checkpoint, "--out", out, "--sentences", "0", "--data", data) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"export: error: --out {out}: holds {', '.join(sorted(files))}, not an "
                       "earlier export (its export.json lists no files); choose another --out, "
                       "or pass --force to replace it whole" + DEBUG)
        assert {f: (out / f).read_text() for f in files} == files


def test_an_empty_out_and_a_mount_point_are_refused_before_the_work(exported, tmp_path,
                                                                    monkeypatch, capsys):
    """issue 57: `--out ""` did the whole export, then failed; a mount point failed with EBUSY
    after all the work (its rename cannot succeed)."""
    from fairseq_shared.export import api

    checkpoint, _, _ = exported

    def no_work(*args, **kwargs):
        raise AssertionError("the export started its work")

    monkeypatch.setattr(api, "load_shared", no_work)
    assert _export_cli(checkpoint, "--out", "", "--sentences", "0") == 2
    assert capsys.readouterr().err.strip() == (
        "export: error: --out '': names no directory; give the directory to write the export "
        "into" + DEBUG)
    mount = tmp_path / "mnt"
    mount.mkdir()
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: os.path.abspath(p) == str(mount)
                        or real_ismount(p))
    assert _export_cli(checkpoint, "--out", mount, "--sentences", "0") == 2
    assert capsys.readouterr().err.strip() == (
        f"export: error: --out {mount}: is a mount point, which the export cannot replace (it "
        "writes beside --out and renames the result into place); pass a directory inside it"
        + DEBUG)


def test_a_full_disk_names_the_file_being_written_not_an_input(tmp_path):
    """issue 57: at 300 KB free the export blamed its input spm.model (shutil's copy names the
    source first), at 1,100 KB it printed a transformers traceback (the tokenizers library
    raises no OSError)."""
    import errno

    from fairseq_shared.export.directory import write_error

    staging, out = str(tmp_path / ".d.export-staging-x"), "d"
    os.makedirs(os.path.join(staging, "hf"))
    copy = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    copy.filename, copy.filename2 = "/data/spm.model", os.path.join(staging, "spm.model")
    tail = ("No space left on device (ENOSPC); free space there, or choose another --out; "
            "nothing was moved into --out d (an earlier export there is kept)")
    assert str(write_error(copy, staging, out)) == (
        f"--out d: the disk is full, writing d/spm.model: {tail}")
    with open(os.path.join(staging, "hf", "tokenizer.json"), "w") as f:
        f.write("{")  # the file a writer that names none was writing
    rust = Exception("No space left on device (os error 28)")
    assert str(write_error(rust, staging, out)) == (
        f"--out d: the disk is full, writing d/hf/tokenizer.json: {tail}")
    denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES),
                             os.path.join(staging, "ct2"))
    assert str(write_error(denied, staging, out)) == (
        "d/ct2: cannot write it: Permission denied; nothing was moved into --out d (an earlier "
        "export there is kept)")
    assert write_error(ValueError("a bug"), staging, out) is None  # not a write failure


def test_export_errors_are_one_line_and_debug_shows_the_traceback(tmp_path):
    """issue 54: export had its own error line and rejected --debug (cli/errors.py now)."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "fairseq_shared.cli.export", str(tmp_path / "missing.pt"),
            "--out", str(tmp_path / "o")]
    plain = subprocess.run(argv, capture_output=True, text=True)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().splitlines()[-1] == (
        f"export: error: {tmp_path / 'missing.pt'}: no such checkpoint file" + DEBUG)
    debug = subprocess.run(argv + ["--debug"], capture_output=True, text=True)
    assert debug.returncode != 0 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == (
        f"fairseq_shared.checkpoint_io.CheckpointError: {tmp_path / 'missing.pt'}: no such "
        "checkpoint file")
