"""Run-queue workers for the queue and suite tests, on the toy corpus (built once per pytest
run): a ``python -m`` worker of one suite's command (``harness.<cli>``, run from the checkout)
as a real process, for the tests that kill or race workers, or the same command's main called
in the test's process, for the tests that only read what a worker wrote."""

import contextlib
import importlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from harness import queue
from helpers_data import shared_toy_corpus
from helpers_env import pythonpath

ROOT = Path(__file__).resolve().parents[1]
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "a@b"}  # for workers run with --commit
_TOY = {}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> str:
    """The toy corpus (built once per run, shared with the other modules and xdist workers:
    helpers_data.shared_toy_corpus; the workers only read it)."""
    if "path" not in _TOY:
        _TOY["path"] = shared_toy_corpus(tmp_path_factory)
    return _TOY["path"]


def start_worker(cli: str, toy: str, root: Path, *args: str, delay=None,
                 command: str = "run") -> subprocess.Popen:
    """``python -m harness.<cli> run`` (or ``command``) with work and results under ``root``;
    ``delay``: the claim delay to inject (:data:`queue.CLAIM_DELAY_ENV`)."""
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               **GIT_IDENTITY)
    env.pop(queue.CLAIM_DELAY_ENV, None)
    if delay:
        env[queue.CLAIM_DELAY_ENV] = str(delay)
    cmd = [sys.executable, "-m", f"harness.{cli}", command, "--data", toy,
           "--work", str(root / "work"), "--results", str(root / "results"), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def run_worker(cli: str, toy: str, root: Path, *args: str, command: str = "run") -> str:
    """What ``start_worker(cli, toy, root, *args, command=command).communicate()[0]`` gives,
    from ``harness.<cli>``'s main called in this process: no interpreter starts for the
    worker, and its fairseq runs are forks of the suite's server (conftest.py)."""
    argv = [command, "--data", toy, "--work", str(root / "work"), "--results",
            str(root / "results"), *args]
    out = io.StringIO()
    sigterm = signal.getsignal(signal.SIGTERM)  # a worker's main takes SIGTERM over
    try:
        with mock.patch.dict(os.environ, GIT_IDENTITY), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(out):
            os.environ.pop(queue.CLAIM_DELAY_ENV, None)
            importlib.import_module(f"harness.{cli}").main(argv)
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    return out.getvalue()


def attempts(run_dir: Path) -> int:
    """How many times fairseq-train was started in ``run_dir`` (one header line each)."""
    log = Path(run_dir) / "train.log"
    return sum(line.startswith("# ") for line in log.read_text().splitlines())
