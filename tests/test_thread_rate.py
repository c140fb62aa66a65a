"""``scripts/thread_rate.py``: steady training rates from fairseq's log and the CPU log, and a
real measurement on the toy corpus."""

import os
import sys

import pytest

from helpers_queue import toy  # noqa: F401  (a fixture)


@pytest.fixture
def thread_rate():
    """``scripts/thread_rate.py`` as a module."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "scripts"))
    import thread_rate as module

    return module


def test_steady_rates_leave_out_the_first_interval(thread_rate):
    inner = [{"ups": "0.5"}, {"ups": "2.0"}, {"ups": "2.5"}, {"ups": "1.5"}]
    cpu = [{"update": 0, "cpu": 0.0}, {"update": 25, "cpu": 40.0},  # start-up: left out
           {"update": 50, "cpu": 65.0}, {"update": 75, "cpu": 90.0}, {"update": 100, "cpu": 115.0}]
    rates = thread_rate.steady_rates(inner, cpu)
    assert rates == {"steady_s_per_update": 0.5, "steady_cpu_s_per_update": 1.0,
                     "cores_busy": 2.0, "steady_updates": 75}
    with pytest.raises(SystemExit, match="--updates: too few logged intervals"):
        thread_rate.steady_rates(inner[:1], cpu[:2])


@pytest.mark.slow
def test_a_measurement_trains_the_budget_command_and_reads_its_cpu_log(thread_rate, toy):
    row = thread_rate.measure("vanilla", 1, toy, 12, "tiny_milestones")
    assert row["config"] == "vanilla" and row["updates"] == 12 and row["params"] > 0
    # log_interval 2: the intervals after the first span updates 2..12
    assert row["steady_updates"] == 10
    assert row["steady_cpu_s_per_update"] > 0 and row["steady_s_per_update"] > 0
    # one thread: about one core's CPU time per second, however loaded the machine. Loosely:
    # the CPU clock's span (updates 2..12) holds the checkpoint save and validation at the
    # toy budget's update-10 milestone, which fairseq's median updates/s leaves out, and at
    # about 20 ms an update that one-off weighs (it read 1.7x once; 2 threads would read >2x
    # on top of it)
    assert row["steady_cpu_s_per_update"] < 3 * row["steady_s_per_update"]
