"""The README's answer table: each configuration's budget results joined with the frontier's
size and speed of the same final models, in the README's order, from hand-made records."""

import json

import pytest

from harness.budget_summary import speed_cells, summary_table
from harness.frontier_report import LORA_MERGED, later_runs
from harness.statistics import Difference


def final(name, seed, bleu, decoder_n=3, params=1000):
    return {"name": name, "seed": seed, "label": name.title(), "N": 3, "decoder_N": decoder_n,
            "params": params, "test": {"bleu": bleu}}


def frontier_record(model, tok_s, int8_tok_s=None, machine=None):
    batch = lambda t: {"1": {"bleu": 20.0, "chrf": 40.0, "cpu_tokens_per_s": t}}  # noqa: E731
    engines = {"fairseq": {"batch": batch(tok_s), "disk_bytes": 8e6}}
    if int8_tok_s:
        engines["ct2_int8"] = {"batch": batch(int8_tok_s), "disk_bytes": 2e6}
    return {"model": model, "params": 1000, "settings": {"batch_sizes": [1]},
            "machine": machine or {"host": "h", "cpu_model": "c", "boot_id": "b"},
            "engines": engines}


def test_rows_join_the_budget_and_the_frontier_in_the_readme_order():
    finals = {"vanilla_2L_dec1": {1: final("vanilla_2L_dec1", 1, 28.0, decoder_n=1)},
              "vanilla": {1: final("vanilla", 1, 29.0), 2: final("vanilla", 2, 31.0)},
              "san_dec2L": {1: final("san_dec2L", 1, 30.5, decoder_n=6)}}
    finals["vanilla"][1]["average_valid_loss"] = 5.5
    finals["vanilla"][2]["average_valid_loss"] = 5.4
    versus = {"vanilla_2L_dec1": {"bleu": Difference(-1.0, -1.5, -0.5, (2, 1))},
              "san_dec2L": {"bleu": Difference(1.5, -0.5, 3.5, (2, 1)),
                            "valid_loss": Difference(-0.05, -0.1, 0.0, (2, 1))}}
    frontier = [frontier_record("vanilla_s1", 100, 400), frontier_record("vanilla_s2", 300),
                frontier_record("vanilla_2L_dec1_s1", 300)]
    lines = summary_table(finals, versus, {"vanilla": 0.5, "vanilla_2L_dec1": 0.45}, frontier,
                          6.27)
    assert lines[0].endswith("| MB (fairseq / ct2_int8) | xvanilla b=1: fairseq / torchscript / "
                             "ct2_float32 / ct2_int8 |")
    assert lines[2] == ("| lookup baseline (closest training verse) | - | - | - | 6.27 "
                        "| - | - | - | - | - | - |")
    # vanilla's speed is its seeds' mean (200 tok/s); ct2_int8 was timed in one seed only
    # the 95% interval over two seeds is t(1) wide
    assert lines[3] == ("| `vanilla`: vanilla | 3+3 | 1,000 | 2 | 30.00 ± 1.41 [17.29, 42.71] "
                        "(29.00, 31.00) | - | 5.450 ± 0.071 [4.815, 6.085] (5.500, 5.400) | - "
                        "| 1.00 | 8.00 / 2.00 | 1.00 / - / - / 2.00 |")
    # the shallow decoder comes right after SAN, whatever order the records came in; a model
    # the frontier has not measured says so
    assert lines[4] == ("| `san_dec2L`: SAN, the paper's policy (Xiao et al.) | 3+6 | 1,000 | 1 "
                        "| 30.50 (one seed) | not resolved: +1.50 [-0.50, +3.50] (2 vs 1 seeds) "
                        "| not measured | not resolved: -0.050 [-0.100, +0.000] (2 vs 1 seeds) "
                        "| - | not measured | - |")
    assert lines[5] == ("| `vanilla_2L_dec1`: deep encoder, shallow decoder (Kasai et al.) | 3+1 "
                        "| 1,000 | 1 | 28.00 (one seed) | -1.00 [-1.50, -0.50] (2 vs 1 seeds) "
                        "| not measured | - | 0.90 | 8.00 / - | 1.50 / - / - / - |")
    assert len(lines) == 6


def test_speeds_from_another_machine_boot_are_not_compared():
    finals = {"vanilla": {1: final("vanilla", 1, 29.0)},
              "nodec_ffn": {1: final("nodec_ffn", 1, 27.0)}}
    frontier = [frontier_record("vanilla_s1", 100),
                frontier_record("nodec_ffn_s1", 150, machine={"host": "other"})]
    row = summary_table(finals, {}, None, frontier, None)[-1]
    assert row.endswith("| - | 8.00 / - | - / - / - / - |")  # no training rates, no ratio


def test_a_later_frontier_run_fills_the_rows_the_first_lacks_with_its_own_anchor():
    """Models trained after the frontier's run are timed later, in another machine boot, beside
    vanilla: their ratios divide by that run's vanilla, and the first run's rows stand."""
    finals = {"vanilla": {1: final("vanilla", 1, 29.0)},
              "nodec_ffn": {1: final("nodec_ffn", 1, 27.0)},
              "vanilla_2L_dec1": {1: final("vanilla_2L_dec1", 1, 28.0, decoder_n=1)}}
    first = [frontier_record("vanilla_s1", 100), frontier_record("nodec_ffn_s1", 150)]
    other = {"host": "h", "cpu_model": "c", "boot_id": "later"}
    later = [frontier_record("vanilla_s1", 50, machine=other),
             frontier_record("nodec_ffn_s1", 50, machine=other),
             frontier_record("vanilla_2L_dec1_s1", 80, machine=other)]
    lines = summary_table(finals, {}, None, first, None, later={"later": later})
    rows = {line.split("`")[1]: line for line in lines[2:]}
    assert rows["vanilla"].endswith("| 1.00 / - / - / - |")
    assert rows["nodec_ffn"].endswith("| 1.50 / - / - / - |")  # the first run's, not 1.00
    assert rows["vanilla_2L_dec1"].endswith("| 1.60 / - / - / - |")  # 80 / the later vanilla's 50
    later[2]["settings"] = {"batch_sizes": [1, 32]}
    with pytest.raises(SystemExit, match="vanilla_2L_dec1_s1: a later frontier run's settings differ"):
        summary_table(finals, {}, None, first, None, later={"later": later})


def test_each_later_frontier_run_is_one_boot_with_its_own_anchor(tmp_path):
    """frontier_later/RUN/: one folder per later run, read apart so that each divides by the
    vanilla timed in it; a folder mixing boots, or without vanilla, is refused by name."""
    other = {"host": "h", "cpu_model": "c", "boot_id": "later"}
    runs = {"2026-12-05": [frontier_record("vanilla_s1", 50, machine=other),
                           frontier_record("vanilla_2L_dec1_s1", 80, machine=other)],
            "2026-12-06": [frontier_record("vanilla_s1", 100),
                           frontier_record("nodec_ffn_s1", 150)]}
    for run, records in runs.items():
        (tmp_path / run / "models").mkdir(parents=True)
        for rec in records:
            (tmp_path / run / "models" / f"{rec['model']}.json").write_text(json.dumps(rec))
    later = later_runs(str(tmp_path))
    by_model = lambda rs: sorted(rs, key=lambda r: r["model"])  # noqa: E731  (read by name)
    assert later == {f"{tmp_path}/{run}": by_model(records) for run, records in runs.items()}
    finals = {"vanilla": {1: final("vanilla", 1, 29.0)},
              "nodec_ffn": {1: final("nodec_ffn", 1, 27.0)},
              "vanilla_2L_dec1": {1: final("vanilla_2L_dec1", 1, 28.0, decoder_n=1)}}
    rows = {line.split("`")[1]: line for line in summary_table(
        finals, {}, None, [frontier_record("vanilla_s1", 70)], None,
        later=later)[2:]}
    assert rows["vanilla_2L_dec1"].endswith("| 1.60 / - / - / - |")  # over its run's 50
    assert rows["nodec_ffn"].endswith("| 1.50 / - / - / - |")  # over its run's 100
    (tmp_path / "2026-12-06" / "models" / "vanilla_s1.json").unlink()
    with pytest.raises(SystemExit, match=f"{tmp_path}/2026-12-06: no vanilla model timed in it"):
        later_runs(str(tmp_path))
    mixed = frontier_record("vanilla_s1", 100, machine=other)
    (tmp_path / "2026-12-06" / "models" / "vanilla_s1.json").write_text(json.dumps(mixed))
    with pytest.raises(SystemExit, match="2026-12-06: its records come from more than one"):
        later_runs(str(tmp_path))


def test_a_model_timed_in_two_later_runs_gets_their_mean_and_a_note_giving_each():
    """The same pair of models read in two runs is two measurements of one ratio: the table shows
    their mean, the note each run's, and frontier/'s own models keep frontier/'s ratio."""
    first = [frontier_record("vanilla_s1", 100, 800), frontier_record("nodec_ffn_s1", 150)]
    boot = lambda b: {"host": "h", "cpu_model": "c", "boot_id": b}  # noqa: E731
    later = {"x/2026-12-05": [frontier_record("vanilla_s1", 100, 1200, machine=boot("a")),
                              frontier_record("nodec_ffn_s1", 50, machine=boot("a")),
                              frontier_record("vanilla_distilled_s1", 90, 600, machine=boot("a"))],
             "x/2026-12-05b": [frontier_record("vanilla_s1", 50, machine=boot("b")),
                               frontier_record("vanilla_distilled_s1", 55, machine=boot("b"))]}
    cells, notes = speed_cells(first, later)
    assert cells["nodec_ffn"]["speed"]["1"] == "1.50 / - / - / -"  # frontier/'s, not 0.50
    assert cells["vanilla_distilled"]["ratios"]["1"][0] == pytest.approx((0.9 + 1.1) / 2)
    assert cells["vanilla_distilled"]["speed"]["1"] == "1.00 / - / - / -"  # int8 in one run only
    # int8: 600 over its run's vanilla's 1,200, times frontier/'s vanilla's 8.00
    assert notes == ["`vanilla_distilled`'s speed cells are the means of 2 later runs: "
                     "b=1 0.90 / - / - / 4.00 (`2026-12-05`); b=1 1.10 / - / - / - (`2026-12-05b`)."]


def test_a_later_runs_engines_are_bridged_through_vanillas_same_engine():
    """A later run's machine may run one engine faster against eager fairseq than frontier/'s
    (vanilla's int8 reads 12x there, 8x here): each engine's cell is the model's speed over
    vanilla's in that engine and run, times vanilla's ratio in frontier/, so a model exactly as
    fast as vanilla in int8 reads vanilla's 8.00, not 12.00; an engine vanilla lacks in either
    run is not measured."""
    first = [frontier_record("vanilla_s1", 100, 800)]
    other = {"host": "h", "cpu_model": "c", "boot_id": "later"}
    later = {"x/run": [frontier_record("vanilla_s1", 50, 600, machine=other),
                       frontier_record("cycle_rev_2L_s1", 40, 600, machine=other),
                       frontier_record("nodec_ffn_s1", 60, 300, machine=other)]}
    cells, notes = speed_cells(first, later)
    assert cells["vanilla"]["speed"]["1"] == "1.00 / - / - / 8.00"
    assert cells["cycle_rev_2L"]["speed"]["1"] == "0.80 / - / - / 8.00"  # raw: 0.80 / 12.00
    assert cells["nodec_ffn"]["ratios"]["1"] == [pytest.approx(1.2), None, None, pytest.approx(4.0)]
    first = [frontier_record("vanilla_s1", 100)]  # frontier/'s vanilla has no int8: nothing to bridge to
    assert speed_cells(first, later)[0]["cycle_rev_2L"]["speed"]["1"] == "0.80 / - / - / -"
    assert notes == []


def test_a_lora_models_size_says_its_export_stores_every_layer():
    """A LoRA-relaxed model's exports merge the deltas into each layer, so its CTranslate2 size
    is an unshared model's: the MB cell says so, from the record's export; a rigidly shared or
    untied-norm model's cell is the size alone."""
    first = [frontier_record("vanilla_s1", 100, 800)]
    lora = frontier_record("cycle_rev_2L_lora8_s1", 40, 600)
    lora["export"] = {"exportable": True, "lora_merged": ["encoder", "decoder"]}
    depthcond = dict(frontier_record("cycle_rev_2L_depthcond_s1", 40, 600),
                     export={"exportable": True, "lora_merged": []})
    cells, _ = speed_cells(first, {"x/run": [frontier_record("vanilla_s1", 100, 800), lora,
                                             depthcond]})
    assert cells["cycle_rev_2L_lora8"]["mb"] == f"8.00 / 2.00 ({LORA_MERGED})"
    assert LORA_MERGED.startswith("ct2: the LoRA deltas merged")
    assert cells["cycle_rev_2L_depthcond"]["mb"] == cells["vanilla"]["mb"] == "8.00 / 2.00"
