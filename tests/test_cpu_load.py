"""issue 38, item 8: the trainer's OpenMP wait policy, chosen from the machine's load at its
start (``harness/cpu_load.py``), on synthetic ``/proc/stat`` samples."""

import pytest

from fairseq_shared.errors import FairseqSharedError
from harness import cpu_load
from harness.training import training_env, wait_policy


def stat(user, nice, system, idle, cpus=2):
    """A /proc/stat text: the machine-wide line and ``cpus`` per-core lines."""
    lines = [f"cpu  {user} {nice} {system} {idle} 0 0 0 0 0 0"]
    lines += [f"cpu{i} 0 0 0 0 0 0 0 0 0 0" for i in range(cpus)]
    return "\n".join(lines + ["intr 1 2 3", "ctxt 99", "procs_running 3"]) + "\n"


def busy_between(a, b):
    return cpu_load.busy_cores(cpu_load.parse_stat(a), cpu_load.parse_stat(b))


def test_busy_cores_count_nice_0_work_and_leave_niced_work_out():
    # 0.5 s on 2 cores = 100 jiffies: one process at nice 0 took 50 of them
    assert busy_between(stat(0, 0, 0, 0), stat(45, 0, 5, 50)) == pytest.approx(1.0)
    # the same work at nice 19 (a test run beside the trainer) yields: nothing busy
    assert busy_between(stat(0, 0, 0, 0), stat(0, 50, 0, 50)) == 0.0
    # two busy processes, one niced: one core
    assert busy_between(stat(10, 10, 10, 10), stat(58, 60, 12, 10)) == pytest.approx(1.0)
    assert busy_between(stat(0, 0, 0, 0), stat(0, 0, 0, 0)) == 0.0  # no time passed
    assert cpu_load.parse_stat(stat(1, 2, 3, 4, cpus=16))["cpus"] == 16
    with pytest.raises(ValueError, match="no 'cpu' line"):
        cpu_load.parse_stat("intr 1\n")


@pytest.mark.parametrize("busy, cpus, threads, policy", [
    (0.05, 2, 2, "DEFAULT"),   # idle: spinning is fastest
    (0.4, 2, 2, "DEFAULT"),    # a core counts busy from half of it on
    (0.97, 2, 2, "PASSIVE"),   # one busy process: two threads have one core
    (0.97, 2, 1, "DEFAULT"),   # ... one thread has its own
    (2.0, 2, 1, "PASSIVE"),
    (2.0, 16, 2, "DEFAULT"),
])
def test_the_policy_spins_only_with_a_free_core_for_each_thread(busy, cpus, threads, policy):
    assert cpu_load.wait_policy_for(busy, cpus, threads) == policy
    assert (cpu_load.load_warning(busy, cpus, threads) is None) == (policy == "DEFAULT")


def test_the_warning_names_the_load_and_the_fair_slowdown():
    # 2 threads beside one busy process on 2 cores: 3 runnable threads on 2 cores, 1.5x
    warning = cpu_load.load_warning(1.02, 2, 2)
    assert warning.startswith("load: 1.0 of 2 cores busy before training")
    assert "1 free core," in warning and "PASSIVE" in warning and "about 1.5x" in warning
    assert "about 2.0x" in cpu_load.load_warning(1.9, 2, 2)  # beside two: 4 threads, 2 cores
    assert cpu_load.fair_slowdown(0.0, 2, 2) == 1.0


def test_auto_samples_the_load_and_an_explicit_policy_does_not():
    def sample():
        calls.append(1)
        return 1.0, 2

    calls = []
    assert wait_policy(2, None, {}, sample)[0] == "PASSIVE" and calls == [1]
    assert wait_policy(1, "auto", {}, sample) == ("DEFAULT", None) and len(calls) == 2
    # a caller's own OMP_WAIT_POLICY is kept; a flag wins over it
    assert wait_policy(2, None, {"OMP_WAIT_POLICY": "active"}, sample) == ("ACTIVE", None)
    assert wait_policy(2, "DEFAULT", {"OMP_WAIT_POLICY": "PASSIVE"}, sample) == ("DEFAULT", None)
    assert len(calls) == 2
    # no /proc/stat (not Linux): OpenMP's default, no warning
    assert wait_policy(2, None, {}, lambda: None) == ("DEFAULT", None)
    with pytest.raises(FairseqSharedError, match="--wait-policy: 'spin' is not a wait policy; "
                       "allowed: AUTO, DEFAULT, PASSIVE, ACTIVE"):
        wait_policy(2, "spin", {}, sample)
    with pytest.raises(FairseqSharedError, match="^OMP_WAIT_POLICY: 'x'"):
        wait_policy(2, None, {"OMP_WAIT_POLICY": "x"}, sample)


def test_the_trainer_environment_carries_the_decided_policy():
    env = training_env(2, {"PATH": "/bin", "OMP_WAIT_POLICY": "ACTIVE"})
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("2", "2")
    assert "OMP_WAIT_POLICY" not in env  # DEFAULT: OpenMP's own
    assert training_env(1, {}, "PASSIVE")["OMP_WAIT_POLICY"] == "PASSIVE"


def test_the_real_sample_reads_this_machine():
    load = cpu_load.sample_busy_cores(0.05)
    if load is None:
        pytest.skip("no /proc/stat")
    busy, cpus = load
    assert cpus >= 1 and 0.0 <= busy <= cpus
    assert cpu_load.sample_busy_cores(0.01, "/nonexistent/stat") is None
