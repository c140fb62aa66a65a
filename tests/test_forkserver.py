"""The suite's fork server (tests/helpers_forkserver.py): a forked plug-in run says and exits
what a new process says and exits, stock runs are never forked, a time-out kills the run."""

import subprocess

import pytest

import helpers_forkserver
from helpers_data import ENV, TINY_ARCH, TINY_TRAIN, data_bin
from fairseq_shared.fairseq_commands import USER_DIR, fairseq_tool


def _both(cmd, env=ENV, **kw):
    forked = helpers_forkserver.server_for(env).run(cmd, env, timeout=120, **kw)
    fresh = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, **kw)
    return forked, fresh


def test_only_plug_in_runs_of_fairseq_console_scripts_are_forked():
    train = fairseq_tool("train")
    assert helpers_forkserver.forkable([*train, "data", "--user-dir", USER_DIR])
    assert not helpers_forkserver.forkable([*train, "data"])  # stock fairseq: a new process
    assert not helpers_forkserver.forkable(  # its workers are spawned from __main__
        [*train, "data", "--user-dir", USER_DIR, "--distributed-world-size", "2"])
    assert not helpers_forkserver.forkable(["python", "-m", "fairseq_cli.train", "--user-dir", "x"])
    startup = helpers_forkserver._startup
    assert startup(dict(ENV, FAIRSEQ_SHARED_DEBUG="1")) == startup(ENV)
    assert startup(dict(ENV, OMP_NUM_THREADS="2")) != startup(ENV)  # read when torch loads


@pytest.mark.parametrize("debug", ["0", "1"])
def test_a_failing_run_exits_and_prints_as_a_new_process(tmp_path_factory, tmp_path, debug):
    cmd = [*fairseq_tool("train"), data_bin(tmp_path_factory), *TINY_ARCH, *TINY_TRAIN,
           "--save-dir", tmp_path, "--max-update", "1", "--decoder-share-strategy", "cyclic"]
    forked, fresh = _both([str(a) for a in cmd], dict(ENV, FAIRSEQ_SHARED_DEBUG=debug))
    assert forked.returncode == fresh.returncode != 0
    # the plug-in's one-line error (a traceback under FAIRSEQ_SHARED_DEBUG=1), argv[0] as named
    assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    assert ("Traceback" in forked.stderr) == ("Traceback" in fresh.stderr) == (debug == "1")
    assert not list(tmp_path.glob("*.pt"))


def test_argparse_errors_reach_the_fork_as_from_a_new_process(tmp_path_factory):
    data = str(data_bin(tmp_path_factory))
    forked, fresh = _both([*fairseq_tool("train"), data, *TINY_ARCH, *TINY_TRAIN, "--no-such-flag"])
    assert forked.returncode == fresh.returncode == 2
    assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    assert forked.stderr.splitlines()[-1].startswith("fairseq-train: error: unrecognized")


def test_a_run_past_its_timeout_is_killed(tmp_path_factory, tmp_path):
    cmd = [*fairseq_tool("train"), data_bin(tmp_path_factory), *TINY_ARCH, *TINY_TRAIN,
           "--save-dir", tmp_path, "--max-update", "100000", "--no-save"]
    with pytest.raises(subprocess.TimeoutExpired):
        helpers_forkserver.server_for(ENV).run([str(a) for a in cmd], ENV, timeout=3)
    assert helpers_forkserver.server_for(ENV).alive()


def test_a_finished_run_logs_in_fairseqs_format_as_a_new_process(tmp_path_factory, tmp_path):
    cmd = [str(a) for a in (*fairseq_tool("train"), data_bin(tmp_path_factory), *TINY_ARCH,
                            *TINY_TRAIN, "--max-update", "2", "--no-save", "--save-dir", tmp_path)]
    forked, fresh = _both(cmd)
    assert forked.returncode == fresh.returncode == 0

    def loggers(run):  # fairseq's "time | LEVEL | logger | message" lines, by logger
        return [line.split(" | ")[2] for line in (run.stdout + run.stderr).splitlines()
                if line.count(" | ") >= 3]

    # the one line a fork leaves out: what fairseq.tasks logs on import, done in the server
    assert loggers(forked) == [n for n in loggers(fresh) if n != "fairseq.tasks.text_to_speech"]
    assert "fairseq_cli.train" in loggers(forked)
