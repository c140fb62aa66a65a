"""The CPU-seconds record of training runs (harness/cpu_clock.py)."""

import subprocess
import sys
import time

import pytest

from harness import cpu_clock, training


def test_cpu_per_update_takes_the_last_attempt_and_estimates_unrecorded_updates():
    records = [
        # attempt a: updates 0..50 at 1 s/update, then 50..75 at 2 s/update (killed there)
        {"attempt": "a", "update": 0, "cpu": 0.0}, {"attempt": "a", "update": 50, "cpu": 50.0},
        {"attempt": "a", "update": 75, "cpu": 100.0},
        # attempt b resumed from the checkpoint at 50 and redid 50..75 at 3 s/update
        {"attempt": "b", "update": 50, "cpu": 0.0}, {"attempt": "b", "update": 75, "cpu": 75.0},
    ]
    costs, estimated = cpu_clock.cpu_per_update(records, 100)
    assert costs[:50] == [1.0] * 50 and costs[50:75] == [3.0] * 25
    assert estimated == 25 and costs[75:] == [1.0] * 25  # median of the recorded updates
    assert cpu_clock.cumulative_cpu(costs, 75) == 125.0
    assert cpu_clock.cpu_per_update([], 10) == ([], 10)


def test_learning_curve_adds_cpu_seconds(tmp_path):
    log = tmp_path / "train.log"
    log.write_text('x | INFO | train_inner | {"num_updates": "2", "train_wall": "7"}\n'
                   'x | INFO | valid | {"valid_loss": "9.5", "valid_num_updates": "2"}\n')
    curve = training.learning_curve(str(log), [1.5, 2.0])
    assert curve == [{"update": 2, "valid_loss": 9.5, "train_seconds": 7.0,
                      "train_cpu_seconds": 3.5}]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_process_tree_cpu_counts_busy_time_not_sleep(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c",
                             "import time\nt=time.process_time()\n"
                             "while time.process_time()-t<0.6: pass\ntime.sleep(30)"])
    try:
        time.sleep(0.2)
        deadline = time.time() + 20
        while time.time() < deadline and cpu_clock.process_tree_cpu_seconds(busy.pid) < 0.6:
            time.sleep(0.1)
        first = cpu_clock.process_tree_cpu_seconds(busy.pid)
        time.sleep(0.5)  # sleeping now: no CPU
        second = cpu_clock.process_tree_cpu_seconds(busy.pid)
        assert 0.6 <= first < 5 and second - first < 0.1
        log = cpu_clock.CpuLog(str(tmp_path), busy.pid, "a", start_update=10)
        log.write(20)
        recs = cpu_clock.read_cpu_log(str(tmp_path / "cpu.jsonl"))
        assert [r["update"] for r in recs] == [10, 20] and recs[1]["cpu"] >= 0.6
    finally:
        busy.kill()
        busy.wait()

