"""The one training-rate meter (``harness/train_rate.py``, ``budget rates``): steady rates
from fairseq's log and the CPU log, busy processes beside a measurement, the benchmark table,
and a real measurement on the toy corpus."""

import os
import shutil
import subprocess
import sys

import pytest

from fairseq_shared.errors import FairseqSharedError
from harness import budget, train_rate, training
from helpers_data import shared_main_job
from helpers_queue import toy  # noqa: F401  (a fixture)


@pytest.fixture(autouse=True)
def real_processes(monkeypatch):
    """A measured run is a new process, as in a rates run: the OpenMP wait policy it records
    takes effect when libgomp starts, and its CPU counts the start."""
    monkeypatch.setattr(training, "subprocess", subprocess)


def test_steady_rates_leave_out_the_first_interval():
    inner = [{"ups": "0.5"}, {"ups": "2.0"}, {"ups": "2.5"}, {"ups": "1.5"}]
    cpu = [{"update": 0, "cpu": 0.0}, {"update": 25, "cpu": 40.0},  # start-up: left out
           {"update": 50, "cpu": 65.0}, {"update": 75, "cpu": 90.0}, {"update": 100, "cpu": 115.0}]
    rates = train_rate.steady_rates(inner, cpu)
    assert rates == {"steady_s_per_update": 0.5, "steady_cpu_s_per_update": 1.0,
                     "cores_busy": 2.0, "steady_updates": 75}
    with pytest.raises(FairseqSharedError, match="--updates: too few logged intervals"):
        train_rate.steady_rates(inner[:1], cpu[:2])
    # restarted from a checkpoint at 15,600: its start-up interval is left out the same way
    restarted = [{**r, "update": r["update"] + 15600} for r in cpu]
    assert train_rate.steady_rates(inner, restarted) == rates


def test_a_restart_needs_exactly_one_checkpoint_at_the_update_and_names_what_is_there(tmp_path):
    (tmp_path / "cycle_rev_2L").mkdir()
    for u in (15500, 15600):
        (tmp_path / "cycle_rev_2L" / f"checkpoint_29_{u}.pt").write_bytes(b"")
    assert train_rate.checkpoint_at(str(tmp_path), "cycle_rev_2L", 15600).endswith(
        "checkpoint_29_15600.pt")
    with pytest.raises(FairseqSharedError, match=r"--from-update: no checkpoint of cycle_rev_2L "
                       r"at update 15700 in .*; there: 15500, 15600"):
        train_rate.checkpoint_at(str(tmp_path), "cycle_rev_2L", 15700)
    with pytest.raises(FairseqSharedError, match="there: none"):
        train_rate.checkpoint_at(str(tmp_path), "vanilla", 15600)


def rates(capsys, *flags):
    """``python -m harness.budget rates`` with ``flags``, in this process: (exit code, stderr)."""
    with pytest.raises(SystemExit) as e:
        budget.main(["rates", "--data", "nowhere", "--out", "nowhere.json", *flags])
    return e.value.code, capsys.readouterr().err


def test_rates_refuses_from_without_its_update_in_one_line(capsys):
    with pytest.raises(FairseqSharedError, match="--from and --from-update go together") as e:
        budget.main(["rates", "--data", "nowhere", "--out", "nowhere.json",
                     "--from", "work/budget_long/runs_s1"])
    sys.excepthook(e.type, e.value, e.tb)  # the plug-in's (compat, 8), as the process exits
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert ": error: --from and --from-update go together" in err


def test_busy_processes_run_beside_the_block_and_are_stopped_after_it():
    with train_rate.beside(2) as pids:
        assert len(pids) == 2
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                # alive: running, sleeping, or paging the interpreter in (D); not a zombie
                assert f.read().split()[2] in "RSD"
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}")  # killed and reaped
    with pytest.raises(RuntimeError), train_rate.beside(1) as pids:
        raise RuntimeError("a failed measurement")
    assert not os.path.exists(f"/proc/{pids[0]}")


def test_the_benchmark_table_has_a_column_per_load_and_a_row_per_policy():
    def row(policy, n, s, ran):
        return {"config": "vanilla", "threads": 2, "requested_policy": policy, "beside": n,
                "steady_s_per_update": s, "wait_policy": ran}

    rows = [row("DEFAULT", 0, 0.333, "DEFAULT"), row("DEFAULT", 1, 0.97, "DEFAULT"),
            row("AUTO", 0, 0.33, "DEFAULT"), row("AUTO", 1, 0.62, "PASSIVE")]
    assert train_rate.table(rows).splitlines() == [
        "| config | threads | wait policy | alone | beside 1 |", "|---|---|---|---|---|",
        "| vanilla | 2 | DEFAULT | 0.33 (DEFAULT) | 0.97 (DEFAULT) |",
        "| vanilla | 2 | AUTO | 0.33 (DEFAULT) | 0.62 (PASSIVE) |"]


@pytest.mark.parametrize("flag, value, message", [
    ("--wait-policy", "DEFAULT,spin", "SPIN is not a wait policy; allowed: AUTO, DEFAULT"),
    ("--beside", "0,-1", "-1 is out of range; allowed: an integer >= 0"),
    ("--threads", "2,x", "'x' is not an integer"),
])
def test_rates_refuses_bad_flags_in_one_line(flag, value, message, capsys):
    code, err = rates(capsys, flag, value)
    assert code == 2 and "Traceback" not in err
    assert f"argument {flag}: {message}" in err


@pytest.mark.slow
def test_a_measurement_trains_the_budget_command_and_reads_its_cpu_log(toy):
    row = train_rate.measure("vanilla", 1, toy, 12, "tiny_milestones", policy="PASSIVE")
    assert row["config"] == "vanilla" and row["updates"] == 12 and row["params"] > 0
    assert row["wait_policy"] == "PASSIVE"  # as the trainer ran, from its train.log
    # log_interval 2: the intervals after the first span updates 2..12
    assert row["steady_updates"] == 10
    assert row["steady_cpu_s_per_update"] > 0 and row["steady_s_per_update"] > 0
    # one thread: about one core's CPU time per second, however loaded the machine. Loosely:
    # the CPU clock's span (updates 2..12) holds the checkpoint save and validation at the
    # toy budget's update-10 milestone, which fairseq's median updates/s leaves out, and at
    # about 20 ms an update that one-off weighs (it read 1.7x once; 2 threads would read >2x
    # on top of it)
    assert row["steady_cpu_s_per_update"] < 3 * row["steady_s_per_update"]


@pytest.mark.slow
def test_a_restart_measures_the_updates_after_a_long_runs_checkpoint(toy, tmp_path,
                                                                       tmp_path_factory):
    # the long run: the shared main job's vanilla, this budget's vanilla (same model, data,
    # seed and learning rate) trained to update 8
    _, checkpoints = shared_main_job(tmp_path_factory, toy)
    runs = tmp_path / "runs_s1"
    (runs / "vanilla").mkdir(parents=True)
    shutil.copy(checkpoints["vanilla"], runs / "vanilla" / "checkpoint_1_8.pt")
    row = train_rate.measure("vanilla", 1, toy, 10, "tiny_milestones", policy="PASSIVE",
                             start_from=str(runs), start_update=8)
    assert row["from_update"] == 8 and row["updates"] == 10
    # fairseq went on from update 8 (log_interval 2: logged at 10..18); the first is left out
    assert row["steady_updates"] == 8


@pytest.mark.slow
def test_beside_a_busy_process_auto_records_the_load_and_its_choice(toy):
    row = train_rate.measure_beside(1, "vanilla", 1, toy, 12, "tiny_milestones", "AUTO")
    assert row["beside"] == 1 and row["requested_policy"] == "AUTO"
    assert row["busy_cores_measured"] >= 0.5  # the busy process, at this test's nice value
    assert row["wait_policy"] in ("DEFAULT", "PASSIVE")


def test_the_logged_policy_is_read_from_the_last_start_header(tmp_path):
    from harness.train_rate import logged_policy
    from harness.training import start_header

    log = tmp_path / "train.log"
    log.write_text(start_header("DEFAULT", None, ["fairseq-train", "data"]) + "| INFO | x\n"
                   + start_header("PASSIVE", "2 of 2 cores busy: about 2x", ["fairseq-train"]))
    assert sum(line.startswith("# ") for line in log.read_text().splitlines()) == 2
    assert logged_policy(str(log)) == "PASSIVE"
    log.write_text("| INFO | no header\n")
    assert logged_policy(str(log)) == "?"
