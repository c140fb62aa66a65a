"""The beam-1 column (issue 55, item 3): every final model at beam 1, batch 32, one thread, in
its fastest engine, with its ratio over vanilla 3+3 of its own run, from hand-made records."""

import json

import pytest

from harness import beam1
from harness.budget_summary import summary_table


def record(model, speeds, bleu=None, boot="b", beam=1):
    """A frontier record at batch 32: ``speeds`` {engine: CPU tok/s}; ``bleu`` {engine: BLEU}."""
    bleu = bleu or {}
    return {"model": model, "params": 1000,
            "settings": {"beam": beam, "batch_sizes": [32], "threads": 1},
            "machine": {"host": "h", "cpu_model": "c", "boot_id": boot},
            "engines": {e: {"batch": {"32": {"bleu": bleu.get(e, 20.0), "chrf": 40.0,
                                             "cpu_tokens_per_s": t}}, "disk_bytes": 1e6}
                        for e, t in speeds.items()}}


def write_run(folder, records):
    (folder / "models").mkdir(parents=True)
    for r in records:
        (folder / "models" / f"{r['model']}.json").write_text(json.dumps(r))


def test_each_model_in_its_fastest_engine_over_its_own_runs_vanilla(tmp_path):
    # run a: vanilla's int8 is its fastest (1,000 tok/s); the narrow model's too (1,500: x1.50),
    # the SAN model exports to no CTranslate2 engine (torchscript, 600: x0.60)
    write_run(tmp_path / "beam1" / "a", [
        record("vanilla_s1", {"fairseq": 300, "ct2_int8": 1000}, {"ct2_int8": 29.0}),
        record("narrow_s1", {"fairseq": 350, "ct2_float32": 900, "ct2_int8": 1500},
               {"ct2_int8": 28.0, "fairseq": 28.5}),
        record("san_dec2L_s1", {"fairseq": 250, "torchscript": 600}, {"torchscript": 31.0})])
    # run b, another machine boot: vanilla's int8 800; the narrow model's second seed 1,000
    write_run(tmp_path / "beam1" / "b", [
        record("vanilla_s1", {"ct2_int8": 800}, {"ct2_int8": 29.0}, boot="other"),
        record("narrow_s2", {"ct2_int8": 1000}, {"ct2_int8": 27.0}, boot="other")])
    cells, notes = beam1.cells(beam1.load(str(tmp_path)), not_kept=["narrow_s3", "big_s1"])
    # the narrow model: BLEU (28.0 + 27.0) / 2, tok/s (1,500 + 1,000) / 2, ratios 1.50 and 1.25
    assert cells["narrow"] == "27.50 / 1,250 (ct2_int8) / 1.38 (s1, s2)"
    # vanilla s1 timed in both runs: one seed, each run's ratio 1.00
    assert cells["vanilla"] == "29.00 / 900 (ct2_int8) / 1.00 (s1)"
    assert cells["san_dec2L"] == "31.00 / 600 (torchscript) / 0.60 (s1)"
    assert cells["big"] == "model not kept"  # none of its models timed, and gone
    assert len(notes) == 1 and "`a`, `b`" in notes[0] and "about 3,300 target tokens/s" in notes[0]
    assert "a reference, not a ratio" in notes[0]
    assert "(not kept, so not timed: narrow_s3; `beam1/NOT_KEPT.json`)" in notes[0]
    assert "Vanilla 3+3's own seeds" not in notes[0]  # one seed in each run: no spread to show
    write_run(tmp_path / "beam1" / "c", [
        record("vanilla_s1", {"ct2_int8": 1000}, boot="c"),
        record("vanilla_s2", {"ct2_int8": 750}, boot="c")])
    cells, notes = beam1.cells(beam1.load(str(tmp_path)))
    assert "Vanilla 3+3's own seeds, one architecture in one run, read 750-1,000 tok/s in `c`" \
        in notes[0]
    # s1 in three runs, s2 in one: averaging seeds first would give (1.05 + 0.86) / 2; a run's
    # ratio is of the seeds it timed, so the anchor's own stays 1.00
    assert cells["vanilla"].endswith(" / 1.00 (s1, s2)")


def test_a_run_at_other_settings_or_without_vanilla_is_refused(tmp_path):
    write_run(tmp_path / "beam1" / "a", [record("vanilla_s1", {"ct2_int8": 1000}, beam=4)])
    with pytest.raises(SystemExit, match=r"beam1/a/models/vanilla_s1.json: a beam-1 run is "
                                         r"\{'beam': 1, .*this record has \{'beam': 4"):
        beam1.cells(beam1.load(str(tmp_path)))
    write_run(tmp_path / "other" / "beam1" / "a", [record("narrow_s1", {"ct2_int8": 1000})])
    with pytest.raises(SystemExit, match="no vanilla model timed in it"):
        beam1.load(str(tmp_path / "other"))


def test_the_committed_not_kept_models_are_final_models_history_lacks():
    """``beam1/NOT_KEPT.json`` names only final models with a record, none of the 13 that commit
    228a8ec keeps (results/README.md, "Model binaries") and none timed at beam 1; every other
    final model is timed."""
    from pathlib import Path

    results = Path(__file__).resolve().parent.parent / "results" / "bible_budget"
    gone = beam1.not_kept(str(results))
    finals = {p.stem for p in [*results.glob("runs/*.json"), *results.glob("long/runs/*.json")]}
    assert gone and set(gone) <= finals
    kept = {"attn_shared_s1", "cycle_rev_2L_s1", "cycle_rev_2L_s2", "nodec_ffn_s1",
            "one_wide_ffn_s1", "san_dec2L_s1", "vanilla_2L_dec1_s1", "vanilla_2L_dec1_s2",
            "vanilla_2L_s1", "vanilla_2L_s2", "vanilla_dec2L_s1", "vanilla_s1", "vanilla_s2"}
    timed = {r["model"] for records in beam1.load(str(results)).values() for r in records}
    assert not kept & set(gone) and not timed & set(gone)
    assert finals <= timed | set(gone)  # every final model: in the column, or said to be gone


def test_the_summary_has_the_column_only_where_a_beam1_run_exists(tmp_path):
    finals = {"vanilla": {1: {"name": "vanilla", "seed": 1, "label": "Vanilla", "N": 3,
                              "decoder_N": 3, "params": 1000, "test": {"bleu": 30.0}}}}
    plain = summary_table(finals, {}, None, [], None)
    assert beam1.HEADER not in plain[0]
    write_run(tmp_path / "beam1" / "a", [record("vanilla_s1", {"ct2_int8": 1000},
                                                {"ct2_int8": 29.5})])
    lines = summary_table(finals, {}, None, [], None, beam1_runs=beam1.load(str(tmp_path)))
    assert lines[0].endswith(f"| {beam1.HEADER} |")
    assert lines[2].endswith("| 29.50 / 1,000 (ct2_int8) / 1.00 (s1) |")
    assert lines[-1].startswith("The beam-1 column: `beam1/RUN/models/*.json`")
