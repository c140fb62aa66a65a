"""The relaxed-sharing suite's orchestration and tables (experiments/relaxed*.py); the
conversion, LoRA and learned maps themselves are tested in their own modules."""

import json

from fairseq_shared.experiments import milestones, relaxed, relaxed_report
from fairseq_shared.experiments.configs import load_budget
from fairseq_shared.experiments.runs import Run


def _write_run(results, name, seed, **fields):
    run = {"name": name, "seed": seed, "label": name, "params": 1000, "updates": 2000,
           "seconds_per_update": 2.0, "cpu_seconds_per_update": 1.5, "valid_loss": 5.0,
           "test": {"bleu": 10.0 + seed, "chrf": 30.0, "hypotheses": "hyps/x"},
           "train_command": ["--encoder-share-strategy", "cycle_rev",
                             "--decoder-share-strategy", "cycle_rev"], "curve": [], **fields}
    path = results / "runs" / f"{name}_s{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run))


def test_items_wait_for_the_runs_they_convert_and_compare_with(tmp_path):
    dirs = {"results": str(tmp_path / "relaxed"), "evidence_results": str(tmp_path / "ev")}
    convert_r8 = dict(relaxed.ITEMS[2][2])
    assert relaxed.missing_inputs("train", {"rank": 8}, 1, dirs) == []
    assert relaxed.missing_inputs("convert", convert_r8, 1, dirs) == [
        "evidence vanilla_2L_s1", "relaxed cycle_rev_2L_lora8_s1"]
    _write_run(tmp_path / "ev", "vanilla_2L", 1)
    _write_run(tmp_path / "relaxed", "cycle_rev_2L_lora8", 1)
    assert relaxed.missing_inputs("convert", convert_r8, 1, dirs) == []
    assert relaxed.missing_inputs("learned", {}, 2, dirs) == ["evidence vanilla_2L_s2"]


def test_checkpoint_at_finds_the_interval_checkpoint_whatever_its_epoch(tmp_path):
    (tmp_path / "checkpoint_2_500.pt").write_bytes(b"")
    (tmp_path / "checkpoint_1_400.pt").write_bytes(b"")
    assert milestones.checkpoint_at(str(tmp_path), 500).endswith("checkpoint_2_500.pt")
    assert milestones.checkpoint_at(str(tmp_path), 600) is None


def test_lora_and_learned_configs_reach_the_training_command():
    budget = load_budget("evidence")
    lora = Run(relaxed.cycle_rev_config("x", 8), budget, "/data", "/out")
    cmd = lora.model_flags()
    assert cmd[cmd.index("--encoder-share-lora-rank") + 1] == "8"
    assert cmd[cmd.index("--decoder-share-lora-rank") + 1] == "8"
    assert cmd.count("--encoder-unique-layers") == 1
    learned = Run(dict(name="l", strategy="cycle_rev", N="2L", M="L",
                       encoder_strategy="1,1,2,2,3,3", decoder_strategy="1,2,2,3,3,3"),
                  budget, "/data", "/out")
    cmd = learned.model_flags()
    assert cmd[cmd.index("--encoder-share-strategy") + 1] == "1,1,2,2,3,3"
    assert cmd[cmd.index("--decoder-share-strategy") + 1] == "1,2,2,3,3,3"
    assert "--encoder-unique-layers" not in cmd  # an explicit map carries its own M


def test_tables_render_from_run_files_with_missing_rows_marked(tmp_path):
    ev, rx = tmp_path / "ev", tmp_path / "rx"
    for name in ("vanilla", "cycle_rev_2L", "vanilla_2L"):
        _write_run(ev, name, 1)
    _write_run(rx, "cycle_rev_2L_lora8", 1, train_command=[
        "--encoder-share-strategy", "cycle_rev", "--encoder-share-lora-rank", "8"])
    _write_run(rx, "convert_cycle_rev_r0", 1, rank=0, kind="convert",
               conversion={"stacks": {"encoder": {"positions": [
                   {"before": 0.5, "after": 0.5}, {"before": 0.3, "after": 0.1}]}}},
               after_conversion={"bleu": 0.5}, finetuned={"test": {"bleu": 7.25}},
               scratch_at_same_updates={"test": {"bleu": 6.0}})
    text = open(relaxed_report.render(str(rx), str(ev), "cmd")).read()
    assert "| cycle_rev_2L_lora8 | enc cycle_rev | 8 | 1,000 | 1 | 2000 | 1.50 |" in text
    assert "| cycle_rev M=L, LoRA rank 0 | 1 | 11.00 | 0.400 → 0.300 | 0.50 | 7.25 | 6.00 |" in text
    assert "cycle_rev_2L_lora32 (relaxed) | not run yet" in text
    assert "convert_cycle_rev_r8 | not run yet" in text
