"""Run-queue workers as real processes, for the queue and suite tests: a ``python -m`` worker
of one suite's command (``harness.<cli>``, run from the checkout) on the toy corpus (built once
per pytest run)."""

import os
import subprocess
import sys
from pathlib import Path

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


def attempts(run_dir: Path) -> int:
    """How many times fairseq-train was started in ``run_dir`` (one header line each)."""
    log = Path(run_dir) / "train.log"
    return sum(line.startswith("# ") for line in log.read_text().splitlines())
