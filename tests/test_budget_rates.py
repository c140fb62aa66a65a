"""Training CPU per update as the budget's tables read it (``harness/budget_rates.py``): one
machine's run, and later runs' rows scaled by their own vanilla 3+3."""

import json

import pytest

from harness import budget_rates, budget_report
from harness.budget_summary import summary_table

RECORD = {"name": "vanilla_2L_narrow", "seed": 1, "label": "Narrow", "N": 6, "decoder_N": 6,
          "params": 1000, "test": {"bleu": 20.0}}

def test_training_cost_is_compared_from_one_machine_run(tmp_path):
    rates = {"command": "python scripts/thread_rate.py ...", "started": "2026-12-02 06:00:00",
             "machine": {"cpu_model": "Some CPU", "cpu_count": 2},
             "rows": [{"config": "vanilla", "threads": 2, "steady_cpu_s_per_update": 0.8,
                       "steady_s_per_update": 0.43},
                      {"config": "vanilla", "threads": 1, "steady_cpu_s_per_update": 0.6,
                       "steady_s_per_update": 0.6},
                      {"config": "cycle_rev_2L", "threads": 2, "steady_cpu_s_per_update": 1.2,
                       "steady_s_per_update": 0.64}]}
    finals = {"vanilla": {1: {"threads": 2}, 2: {"threads": 1}}, "cycle_rev_2L": {1: {"threads": 2}}}
    assert budget_rates.training_rates(str(tmp_path), finals) is None
    (tmp_path / budget_rates.RATE_FILE).write_text(json.dumps(rates))
    read = budget_rates.training_rates(str(tmp_path), finals)
    # the thread count most final records trained with (2) only
    assert {n: r["steady_cpu_s_per_update"] for n, r in read["rows"].items()} == \
        {"vanilla": 0.8, "cycle_rev_2L": 1.2}
    finals["cycle_rev_2L"][1]["threads"] = finals["vanilla"][1]["threads"] = 1
    assert set(budget_rates.training_rates(str(tmp_path), finals)["rows"]) == {"vanilla"}
    table = "\n".join(budget_rates.rate_table(read, {"vanilla": "3+3", "cycle_rev_2L": "6+6"}))
    assert "| vanilla | 3+3 | 0.800 | 1.00 | 0.430 |" in table
    assert "| cycle_rev_2L | 6+6 | 1.200 | 1.50 | 0.640 |" in table
    assert "Some CPU" in table
    by_seed = {1: {1000: {"train_cpu_seconds": 3600.0}, 2000: {"train_cpu_seconds": 7200.0}},
               2: {1000: {"train_cpu_seconds": 5400.0}, 2000: {"train_cpu_seconds": 9000.0}}}
    cpu = {n: r["steady_cpu_s_per_update"] for n, r in read["rows"].items()}
    assert budget_report.cpu_hours("cycle_rev_2L", by_seed, [1000, 2000], cpu) == \
        pytest.approx([1000 * 1.2 / 3600, 2000 * 1.2 / 3600])
    assert budget_report.cpu_hours("attn_shared", by_seed, [1000, 2000], cpu) is None
    # without a one-machine measurement: the milestones' own CPU, mean over seeds
    assert budget_report.cpu_hours("cycle_rev_2L", by_seed, [1000, 2000], None) == \
        pytest.approx([1.25, 2.25])



def test_a_later_runs_rows_enter_as_ratios_over_its_own_vanilla_and_are_marked(tmp_path):
    first = {"command": "rates A", "machine": {"cpu_model": "Xeon"},
             "rows": [{"config": "vanilla", "threads": 2, "steady_cpu_s_per_update": 0.6,
                       "steady_s_per_update": 0.3},
                      {"config": "cycle_rev_2L", "threads": 2, "steady_cpu_s_per_update": 0.84,
                       "steady_s_per_update": 0.42}]}
    later = {"command": "rates B", "machine": {"cpu_model": "EPYC"},
             "rows": [{"config": "vanilla", "threads": 2, "steady_cpu_s_per_update": 1.5,
                       "steady_s_per_update": 0.75},
                      {"config": "cycle_rev_2L", "threads": 2, "steady_cpu_s_per_update": 1.8,
                       "steady_s_per_update": 0.9},
                      {"config": "vanilla_2L_narrow", "threads": 2,
                       "steady_cpu_s_per_update": 1.65, "steady_s_per_update": 0.8},
                      {"config": "cycle_rev_2L_lora8", "threads": 1,
                       "steady_cpu_s_per_update": 3.0, "steady_s_per_update": 3.0}]}
    (tmp_path / budget_rates.RATE_FILE).write_text(json.dumps(first))
    (tmp_path / budget_rates.RATE_SUPPLEMENTS[0]).write_text(json.dumps(later))
    finals = {"vanilla": {1: {"threads": 2}}, "vanilla_2L_narrow": {1: {"threads": 2}}}
    rates = budget_rates.training_rates(str(tmp_path), finals)
    rows = rates["rows"]
    # the first run's own rows stand; the later one's at the same thread count enter scaled
    assert rows["cycle_rev_2L"]["steady_cpu_s_per_update"] == 0.84
    assert abs(rows["vanilla_2L_narrow"]["steady_cpu_s_per_update"] - 0.66) < 1e-9
    assert rows["vanilla_2L_narrow"]["scaled_from"] == budget_rates.RATE_SUPPLEMENTS[0]
    assert "cycle_rev_2L_lora8" not in rows
    assert budget_rates.scaled(rates, finals) == ["vanilla_2L_narrow"]
    note, = budget_rates.scaled_note(rates, finals)
    assert "vanilla_2L_narrow" in note and "EPYC" in note and "cycle_rev_2L x1.20 in it, x1.40 in train_rate.json" in note
    assert budget_rates.scaled_note(rates, {"vanilla": {}}) == []
    # the first run's table keeps its own rows and points to the later run's file
    table = "\n".join(budget_rates.rate_table(rates, {}))
    assert "vanilla_2L_narrow" not in table.split("Measured later")[0]
    assert "`train_rate_fixed_size.md`" in table
    # the summary marks the scaled cell: 0.66 / 0.6
    summary = summary_table({"vanilla_2L_narrow": {1: RECORD}}, {},
                            {n: r["steady_cpu_s_per_update"] for n, r in rows.items()}, [], None,
                            rate_notes=[note], scaled=["vanilla_2L_narrow"])
    assert "| 1.10 ‡ |" in summary[-3] and summary[-1] == note


def test_a_pair_ratio_comes_from_one_run_that_measured_both(tmp_path):
    """The EPYC run times cycle_rev_2L at 1.20x vanilla and the narrow model at 1.10x; the Xeon
    run, cycle_rev_2L at 1.40x. The narrow model against cycle_rev_2L is 1.65 / 1.8 from the
    one run that measured both, not 0.66 / 0.84 across two CPUs; two rows of the first run
    divide as they are; a configuration no run measured beside the other has no ratio."""
    rows = lambda pairs: [{"config": c, "threads": 2, "steady_cpu_s_per_update": v,  # noqa: E731
                           "steady_s_per_update": v} for c, v in pairs]
    first = {"command": "rates A", "machine": {}, "rows": rows(
        [("vanilla", 0.6), ("cycle_rev_2L", 0.84), ("attn_shared", 0.54)])}
    later = {"command": "rates B", "machine": {}, "rows": rows(
        [("vanilla", 1.5), ("cycle_rev_2L", 1.8), ("vanilla_2L_narrow", 1.65)])}
    (tmp_path / budget_rates.RATE_FILE).write_text(json.dumps(first))
    (tmp_path / budget_rates.RATE_SUPPLEMENTS[0]).write_text(json.dumps(later))
    rates = budget_rates.training_rates(str(tmp_path), {"vanilla": {1: {"threads": 2}}})
    assert budget_rates.rate_ratio(rates, "cycle_rev_2L", "vanilla_2L_narrow") == \
        pytest.approx(1.65 / 1.8)
    assert budget_rates.rate_ratio(rates, "vanilla", "vanilla_2L_narrow") == pytest.approx(1.1)
    assert budget_rates.rate_ratio(rates, "vanilla", "cycle_rev_2L") == pytest.approx(1.4)
    assert budget_rates.rate_ratio(rates, "attn_shared", "vanilla_2L_narrow") is None
    assert budget_rates.rate_ratio(None, "vanilla", "cycle_rev_2L") is None
