"""What the budget tables conclude, on hand-made records: the crossover at equal updates and
at equal training CPU, averaging's gain per run, the best set, and the 16,000-update runs'
seeds (a new seed's averaged 8,000-update milestone is that seed's final; a committed seed is
a reproducibility check)."""

import pytest

from harness import budget_findings, budget_long


def row(name, pair=None):
    """The row fields a worker writes into each record (configs.row_fields)."""
    return {"label": name, "N": 3, "decoder_N": 3, "pair": pair,
            "training_data": "distilled" if name.endswith("_distilled") else "raw",
            "validation_interval": 100, "threads": 2}


def milestone(name, seed, k, losses, bleu=20.0, hyps=None):
    return {"name": name, "seed": seed, "update": k, "params": 1000, "valid_loss": losses[k],
            "curve": [{"update": u, "valid_loss": v} for u, v in sorted(losses.items()) if u <= k],
            "test": {"bleu": bleu, "hypotheses": hyps or f"hyps/{name}_s{seed}_u{k}.en"},
            **row(name)}


def test_crossover_at_equal_updates_and_equal_cpu():
    base = {u: 6.0 - u / 1000 for u in range(100, 1001, 100)}
    shared = {u: 6.2 - 1.2 * u / 1000 for u in range(100, 1001, 100)}  # level at 1,000
    stages = {"vanilla": {1: {1000: milestone("vanilla", 1, 1000, base)}},
              "cycle_rev_2L": {1: {1000: milestone("cycle_rev_2L", 1, 1000, shared)}}}
    lines = budget_findings.crossover_lines(stages, {"rows": {
        "vanilla": {"steady_cpu_s_per_update": 1.0},
        "cycle_rev_2L": {"steady_cpu_s_per_update": 2.0}}})
    equal_updates, equal_cpu = lines[2], lines[3]
    assert "equal updates: +0.000 bits at 1,000 updates" in equal_updates
    assert ("first level or ahead at 1,000 updates (vanilla at 1,000), level or ahead at 1 of "
            "the 1 validations from there") in equal_updates
    # at twice the CPU per update, 500 shared updates cost what 1,000 of the baseline do
    assert "(x2.00 CPU per update): +0.600 bits at 500 updates (vanilla at 1,000)" in equal_cpu
    assert "no crossover up to 500 updates (1 vs 1 seeds)" in equal_cpu


def test_crossover_gap_has_a_seed_interval_and_says_not_resolved_inside_seed_noise():
    base = {1: {u: 6.0 - u / 1000 for u in (100, 200)}, 2: {u: 6.1 - u / 1000 for u in (100, 200)}}
    shared = {s: {u: v + 0.02 for u, v in losses.items()} for s, losses in base.items()}
    stages = {"vanilla": {s: {200: milestone("vanilla", s, 200, l)} for s, l in base.items()},
              "cycle_rev_2L": {s: {200: milestone("cycle_rev_2L", s, 200, l)}
                               for s, l in shared.items()}}
    noisy = budget_findings.crossover_lines(stages, None, (0.05, 10), title="Long")
    assert noisy[0].startswith("## Long (mean over seeds")
    # half-width t(10) * 0.05 * sqrt(1/2 + 1/2) = 0.111
    assert ("equal updates: not resolved: +0.020 [-0.091, +0.131] bits at 200 updates "
            "(vanilla at 200); no crossover up to 200 updates (2 vs 2 seeds)") in noisy[2]
    sharp = budget_findings.crossover_lines(stages, None, (0.001, 10))
    assert "equal updates: +0.020 [+0.018, +0.022] bits at 200 updates" in sharp[2]


def test_a_crossover_that_crosses_back_says_how_often_it_is_level_or_ahead():
    base = {u: 6.0 for u in (100, 200, 300, 400)}
    shared = {100: 6.1, 200: 5.99, 300: 6.01, 400: 5.99}
    stages = {"vanilla": {1: {400: milestone("vanilla", 1, 400, base)}},
              "cycle_rev_2L": {1: {400: milestone("cycle_rev_2L", 1, 400, shared)}}}
    line = budget_findings.crossover_lines(stages, None)[2]
    assert ("first level or ahead at 200 updates (vanilla at 200), level or ahead at 2 of the 3 "
            "validations from there") in line


def test_a_seed_still_training_is_left_out_of_the_crossover_not_cutting_it_short():
    base = {u: 6.0 - u / 1000 for u in range(100, 1001, 100)}
    shared = {u: v + 0.05 for u, v in base.items()}
    stages = {"vanilla": {1: {1000: milestone("vanilla", 1, 1000, base)}},
              "cycle_rev_2L": {1: {1000: milestone("cycle_rev_2L", 1, 1000, shared)},
                               2: {200: milestone("cycle_rev_2L", 2, 200, shared)}}}
    line = budget_findings.crossover_lines(stages, None)[2]
    assert "+0.050 bits at 1,000 updates (vanilla at 1,000)" in line
    assert "(1 vs 1 seeds; cycle_rev_2L s2 left out, at 200 so far)" in line


def test_equal_size_is_equal_updates_for_a_pair_of_one_size_and_unmeasured_otherwise():
    losses = {u: 6.0 - u / 1000 for u in (100, 200)}
    stages = {n: {1: {200: milestone(n, 1, 200, losses)}} for n in ("vanilla", "cycle_rev_2L")}
    lines = budget_findings.crossover_lines(stages, None, int8_mb={"vanilla": 3.05,
                                                                   "cycle_rev_2L": 3.06})
    assert lines[3] == ("- cycle_rev_2L against vanilla, equal size (int8 3.06 MB against 3.05): "
                        "the same size at every update, so as at equal updates above.")
    bigger = budget_findings.equal_size_line("vanilla", "cycle_rev_2L",
                                             {"vanilla": 3.05, "cycle_rev_2L": 4.10})
    assert bigger.endswith("(int8 4.10 MB against 3.05): not the same size, and no model of "
                           "the other's size was trained.")
    assert "not measured" in budget_findings.equal_size_line("vanilla", "cycle_rev_2L",
                                                             {"vanilla": 3.05})
    assert len(budget_findings.crossover_lines(stages, None)) == 4  # no sizes: no size line


def test_averaging_gain_is_per_run():
    losses = {100: 6.0}
    stages = {"vanilla": {1: {100: milestone("vanilla", 1, 100, losses, bleu=20.0)}}}
    finals = {"vanilla": {1: {"updates": 100, "test": {"bleu": 20.8},
                              "average_valid_loss": 5.95}}}
    row = budget_findings.averaging_lines(stages, finals)[-2]
    assert row == "| vanilla_s1 | 100 | 20.00 | 20.80 | +0.80 | 6.000 | 5.950 |"


def test_long_runs_add_new_seeds_and_check_committed_ones(tmp_path):
    losses = {8000: 5.5}
    avg = {"of": ["c.pt"], "valid_loss": 5.45,
           "test": {"bleu": 30.0, "hypotheses": "hyps/vanilla_s3_u8000_avg.en"}}
    long_stages = {"vanilla": {s: {8000: {**milestone("vanilla", s, 8000, losses), "average": avg}}
                               for s in (1, 3)}}
    finals = {"vanilla": {1: {"label": "Vanilla", "N": 3, "decoder_N": 3, "test": {"bleu": 29.0}}}}
    merged = budget_long.with_long_seeds(finals, long_stages, 8000)
    assert merged["vanilla"][1] is finals["vanilla"][1]  # a committed seed is not replaced
    new = merged["vanilla"][3]
    assert new["test"]["bleu"] == 30.0 and new["average_valid_loss"] == 5.45
    assert new["test"]["hypotheses"] == "long/hyps/vanilla_s3_u8000_avg.en"
    assert (new["N"], new["updates"]) == (3, 8000)
    # reproduction: same valid loss and byte-identical hypotheses
    (tmp_path / "long" / "hyps").mkdir(parents=True)
    (tmp_path / "hyps").mkdir()
    for where in ("long/hyps", "hyps"):
        (tmp_path / where / "vanilla_s1_u8000.en").write_text("a b\n")
    long_ms = long_stages["vanilla"][1]
    short = {8000: milestone("vanilla", 1, 8000, losses)}
    folders = str(tmp_path / "long"), str(tmp_path)
    assert budget_long.reproduction(long_ms, short, *folders) == "8,000: identical"
    (tmp_path / "hyps" / "vanilla_s1_u8000.en").write_text("a c\n")
    assert budget_long.reproduction(long_ms, short, *folders) == (
        "8,000: valid loss 5.500 vs 5.500, hypotheses differ")
    assert budget_long.reproduction(long_ms, None, *folders) == "new seed"


def test_a_distilled_students_valid_loss_is_compared_with_no_raw_data_model(tmp_path):
    """Distillation raises a student's loss on the real references while it raises BLEU: its
    valid loss is not set against raw-data models (nor counted for the best valid loss); its
    BLEU still is."""
    refs = ["a b c d", "e f g h"]
    (tmp_path / "hyps").mkdir()

    def final(name, seed, bleu, loss, hyp):
        path = f"hyps/{name}_s{seed}.en"
        (tmp_path / path).write_text(hyp)
        return {"seed": seed, **row(name, pair=name.replace("_distilled", "") if
                                     name.endswith("_distilled") else None),
                "test": {"bleu": bleu, "hypotheses": path}, "average_valid_loss": loss}

    finals = {name: {s: final(name, s, bleu + s / 10, loss + s / 100, hyp) for s in (1, 2)}
              for name, bleu, loss, hyp in [
                  ("vanilla", 30.0, 5.40, "a b c d\ne f g x\n"),
                  ("vanilla_2L_dec1", 28.0, 5.50, "a b c x\ne f g x\n"),
                  ("vanilla_2L_dec1_distilled", 31.0, 6.90, "a b c d\ne f g h\n")]}
    versus, _ = budget_findings.comparisons(finals, str(tmp_path), refs)
    student = versus["vanilla_2L_dec1_distilled"]
    assert "valid_loss" not in student and "valid_loss" not in student["pair"]
    assert student["bleu"].delta == pytest.approx(1.0)
    assert student["pair"]["bleu"].delta == pytest.approx(3.0)
    assert "valid_loss" in versus["vanilla_2L_dec1"]  # two raw-data models still compare
    best = budget_findings.best_sets(finals, str(tmp_path), refs)
    assert best["valid_loss"]["best"] == "vanilla"
    assert "vanilla_2L_dec1_distilled" not in best["valid_loss"]["set"]
    assert best["bleu"]["best"] == "vanilla_2L_dec1_distilled"
    assert budget_findings.best_lines(best)[1].endswith(
        "Left out as trained on the teacher's outputs: vanilla_2L_dec1_distilled.")
