"""The run queue with real processes: a worker killed with SIGKILL mid-run and restarted at
once, and workers racing for one item (a delay injected inside the claim), each record equal
to an uninterrupted run's; claims held by the kernel; failures recorded without stopping the
queue; a worker coming back to an item whose holder died."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import budget_curve, child, queue, queue_cli
from helpers_queue import GIT_IDENTITY, ROOT, run_worker, start_worker, toy  # noqa: F401  (toy: a fixture)
from helpers_queue import attempts as count_attempts
from helpers_env import pythonpath

# 60 updates, a checkpoint and a validation every 10: a kill lands between two of them
SETTINGS = ["--queue", "vanilla:1", "--budget", "tiny", "--set", "max_update=60",
            "--set", "save_interval_updates=10", "--set", "log_interval=5"]


def worker(toy, root, delay=None):
    return start_worker("budget", toy, root, *SETTINGS, delay=delay)


def record(root, item="vanilla_s1"):
    """What must not depend on how the run was interrupted."""
    r = json.loads((root / "results" / "runs" / f"{item}.json").read_text())
    hyps = (root / "results" / r["test"]["hypotheses"]).read_text()
    return {"updates": r["updates"], "valid_loss": r["valid_loss"],
            "valid_nll_loss": r["valid_nll_loss"], "bleu": r["test"]["bleu"],
            "chrf": r["test"]["chrf"], "hyps": hyps, "params": r["params"],
            "curve": [(p["update"], p["valid_loss"], p["valid_nll_loss"]) for p in r["curve"]],
            "cpu_points": sum("train_cpu_seconds" in p for p in r["curve"])}


def attempts(root, item="vanilla"):
    return count_attempts(root / "work" / "runs_s1" / item)


@pytest.fixture(scope="module")
def reference(toy, tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    out = run_worker("budget", toy, root, *SETTINGS)  # in this process: it is never killed
    rec = record(root)
    assert rec["updates"] == 60 and set(range(10, 61, 10)) <= {p[0] for p in rec["curve"]}, out
    return rec


def test_kill_9_mid_run_then_restart_records_the_uninterrupted_result(toy, reference, tmp_path):
    first = worker(toy, tmp_path)
    log = tmp_path / "work" / "runs_s1" / "vanilla" / "train.log"
    pid_file = tmp_path / "work" / "runs_s1" / "vanilla" / child.PID_FILE
    deadline = time.time() + 120
    while time.time() < deadline:  # the second checkpoint saved, training on (a kill inside
        text = log.read_text() if log.exists() else ""  # fairseq's copy is compat.py's case)
        if "@ 20 updates," in text and pid_file.exists():
            break
        time.sleep(0.01)
    trainer = json.loads(pid_file.read_text())["pid"]
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert not (tmp_path / "results" / "runs" / "vanilla_s1.json").exists()
    second = worker(toy, tmp_path)  # at once: the claim was the dead worker's lock
    out, _ = second.communicate(timeout=300)
    assert child.start_time(trainer) is None  # fairseq-train died with its worker
    assert second.returncode == 0, out
    assert attempts(tmp_path) == 2 and "resuming from checkpoint_last.pt" in out
    assert record(tmp_path) == reference


def test_racing_workers_run_an_item_once_with_the_uninterrupted_result(toy, reference, tmp_path):
    # two workers lock at the same moment; a third opens the claim while the item runs but
    # locks only after the winner has released it: it must find the result, not rerun it
    late_go = tmp_path / "late.go"
    workers = [worker(toy, tmp_path, delay=1), worker(toy, tmp_path, delay=1),
               worker(toy, tmp_path, delay=f"until:{late_go}")]
    outs = [w.communicate(timeout=300)[0] for w in workers[:2]]
    late_go.touch()
    outs.append(workers[2].communicate(timeout=300)[0])
    assert all(w.returncode == 0 for w in workers), outs
    finished = [o for o in outs if "this worker finished: vanilla_s1" in o]
    assert len(finished) == 1 and "worker finished: nothing" in outs[2], outs
    assert attempts(tmp_path) == 1
    assert record(tmp_path) == reference


# ---------------------------------------------------------------------------- the loop
class _Forked:
    """A child forked from this process running ``hold(say)`` until killed, as a Popen is
    killed and waited for: it has the package imported already, where a fresh interpreter
    would import fairseq first (seconds). ``say`` writes a line to ``stdout``."""

    def __init__(self, hold):
        r, w = os.pipe()
        self.pid, self.returncode = os.fork(), None
        if self.pid == 0:  # the child never returns into pytest
            try:
                os.close(r)
                hold(lambda text: os.write(w, f"{text}\n".encode()))
            finally:
                os._exit(0)
        os.close(w)
        self.stdout = os.fdopen(r)

    def kill(self):
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

    def wait(self):
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            self.stdout.close()
        return self.returncode


def _holder(work, ident, light=True):
    """A process that holds the claim of ``ident`` until killed (``light``: the same
    record lock as :func:`queue.claim` takes, without importing the package; else
    :func:`queue.claim` itself, in a forked child)."""
    if not light:
        def hold(say):
            with queue.claim(work, ident) as held:
                say(held)
                time.sleep(600)

        proc = _Forked(hold)
        assert proc.stdout.readline().strip() == "True"
        return proc
    path = os.path.join(work, "claims", ident)
    code = ("import fcntl, os, time\n"
            f"os.makedirs(os.path.dirname({path!r}), exist_ok=True)\n"
            f"fd = os.open({path!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print(True, flush=True)\n"
            "time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=pythonpath(ROOT)))
    assert proc.stdout.readline().strip() == "True"
    return proc


def test_claims_are_kernel_locks_released_when_the_holder_dies(tmp_path):
    holder = _holder(str(tmp_path), "a_s1", light=False)
    with queue.claim(str(tmp_path), "a_s1") as held:
        assert not held and queue.held_elsewhere(str(tmp_path), "a_s1")
    holder.kill()
    holder.wait()
    with queue.claim(str(tmp_path), "a_s1") as held:
        assert held
    with queue.claim(str(tmp_path), "a_s1", finished=lambda: True) as held:
        assert not held  # finished while we were on our way: not run again
    assert not queue.held_elsewhere(str(tmp_path), "a_s1")


def test_a_claim_dies_with_its_holder_even_when_a_forked_child_lives_on(tmp_path):
    """A worker decoding a milestone has a forked data-loader child; killing the worker must
    free its claim at once, not when the child notices (the claim is the process's own)."""
    def hold(say):
        with queue.claim(str(tmp_path), "a_s1") as held:
            child = os.fork()
            if child == 0:
                time.sleep(60)
                os._exit(0)
            say(child)
            say(held)
            time.sleep(600)

    holder = _Forked(hold)
    forked = int(holder.stdout.readline())
    try:
        assert holder.stdout.readline().strip() == "True"
        assert queue.held_elsewhere(str(tmp_path), "a_s1")
        holder.kill()
        holder.wait()
        with queue.claim(str(tmp_path), "a_s1") as held:
            assert held  # the forked child (still sleeping) does not hold it
    finally:
        holder.kill()
        holder.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(forked, signal.SIGKILL)


def _suite(calls, fail=(), on_run=None):
    def run(item, ctx):
        calls.append(item.id)
        if on_run:
            on_run(item)
        if item.name in fail:
            raise ValueError(f"bad {item.name}")
        return {"name": item.name, "seed": item.seed, "value": len(calls)}
    return queue.Suite("t", run, lambda item, result, ctx: ([], f"t: {item.id}"))


def test_a_failed_item_is_recorded_and_the_worker_goes_on(tmp_path):
    calls = []
    ctx = queue.Context("", str(tmp_path / "w"), str(tmp_path / "r"), "tiny",
                        progress=lambda m: None)
    items = [queue.Item("a", 1), queue.Item("b", 1), queue.Item("c", 1)]
    assert queue.work(_suite(calls, fail={"b"}), items, ctx) == ["a_s1", "c_s1"]
    assert calls == ["a_s1", "b_s1", "c_s1"]  # b is tried once by this worker
    failed = json.loads(queue.failure_path(ctx.work, "b_s1").read_text())
    assert failed["error"] == "ValueError: bad b" and "Traceback" in failed["traceback"]
    assert not queue.result_path(ctx.results, "b", 1).exists()
    assert queue.state(items[1], ctx).startswith("failed: ValueError: bad b")
    # a later worker tries it again; its success clears the failure
    assert queue.work(_suite(calls), items, ctx) == ["b_s1"]
    assert not queue.failure_path(ctx.work, "b_s1").exists()


def test_a_worker_whose_item_failed_exits_non_zero(tmp_path, capsys):
    cmd = queue_cli.Command(_suite([], fail={"b"}), "doc", results=str(tmp_path / "r"),
                            work=str(tmp_path / "w"), budget="tiny",
                            items=lambda args: [queue.Item("a", 1), queue.Item("b", 1)],
                            render=lambda args: "")
    assert queue_cli.main(cmd, ["run", "--data", "corpus-dir"]) == 1
    err = capsys.readouterr().err
    assert "1 item(s) failed: b_s1" in err and str(queue.failure_path(str(tmp_path / "w"), "b_s1")) in err
    # once the item succeeds, the queue is whole again and the worker exits 0
    cmd.suite = _suite([])
    assert queue_cli.main(cmd, ["run", "--data", "corpus-dir"]) == 0


def test_a_worker_returns_to_an_item_once_its_holder_is_gone(tmp_path):
    work = str(tmp_path / "w")
    holder = _holder(work, "a_s1")

    def kill_holder(item):  # the holder of a dies while this worker runs b
        if item.name == "b":
            holder.kill()
            holder.wait()

    calls = []
    ctx = queue.Context("", work, str(tmp_path / "r"), "tiny", progress=lambda m: None)
    items = [queue.Item("a", 1), queue.Item("b", 1),
             queue.Item("c", 1, needs=(str(queue.result_path(ctx.results, "a", 1)),))]
    assert queue.work(_suite(calls, on_run=kill_holder), items, ctx) == ["b_s1", "a_s1", "c_s1"]


def test_a_worker_stops_when_what_is_left_is_held_by_a_live_worker(tmp_path):
    work = str(tmp_path / "w")
    holder = _holder(work, "a_s1")
    try:
        calls, log = [], []
        ctx = queue.Context("", work, str(tmp_path / "r"), "tiny", progress=log.append)
        assert queue.work(_suite(calls), [queue.Item("a", 1), queue.Item("b", 1)], ctx) == ["b_s1"]
        assert calls == ["b_s1"] and log == ["[t] a_s1: left, held by another worker"]
    finally:
        holder.kill()
        holder.wait()


def test_a_recorded_child_that_outlived_its_worker_is_killed_on_takeover(tmp_path):
    orphan = subprocess.Popen(["sleep", "60"])
    child.record(str(tmp_path), orphan.pid)
    assert child.kill_orphan(str(tmp_path)) == orphan.pid
    assert orphan.wait(timeout=5) == -signal.SIGKILL
    assert not (tmp_path / child.PID_FILE).exists()
    child.record(str(tmp_path), orphan.pid)  # gone (a reused pid would differ in start time)
    assert child.kill_orphan(str(tmp_path)) is None


def test_queue_parsing_names_unknown_configurations():
    # the evidence budget (no milestones) takes any configuration of the catalogue
    assert budget_curve.parse_queue("vanilla:2,san_dec2L:1,universal:1", "evidence") == [
        ("vanilla", 2), ("san_dec2L", 1), ("universal", 1)]
    assert budget_curve.parse_queue(None, "evidence") == budget_curve.QUEUE
    with pytest.raises(SystemExit, match="--queue: unknown configuration 'vanila'"):
        budget_curve.parse_queue("vanila:1", "evidence")
    with pytest.raises(SystemExit, match="needs a seed"):
        budget_curve.parse_queue("vanilla", "evidence")


def test_a_result_left_uncommitted_by_a_killed_worker_is_committed_by_the_next(tmp_path,
                                                                              monkeypatch):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for key, value in GIT_IDENTITY.items():
        monkeypatch.setenv(key, value)
    ctx = queue.Context("", str(tmp_path / "w"), str(repo / "results"), "tiny",
                        progress=lambda m: None, commit_repo=str(repo))
    # finished and written, then killed before its commit
    queue.write_result(queue.result_path(ctx.results, "a", 1), {"name": "a", "seed": 1})
    calls = []
    assert queue.work(_suite(calls), [queue.Item("a", 1), queue.Item("b", 1)], ctx) == ["b_s1"]
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s", "--name-only"],
                         capture_output=True, text=True).stdout.split("\n")
    assert [l for l in log if l] == ["t: b_s1", "results/runs/b_s1.json",
                                     "t: a_s1", "results/runs/a_s1.json"]
    assert calls == ["b_s1"]


def test_a_changed_corpus_snapshot_is_committed_under_its_own_message(tmp_path, monkeypatch):
    """A worker on a rebuilt corpus rewrites the snapshot; its commit names the snapshot, not
    the finished run whose left-over check happens to run next."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for key, value in GIT_IDENTITY.items():
        monkeypatch.setenv(key, value)
    results = repo / "results"
    audit, dictionary = results / "corpus" / "audit.json", results / "corpus" / "dict.txt"

    def prepare(args):
        audit.parent.mkdir(parents=True, exist_ok=True)
        audit.write_text(f"{{\"build\": {prepare.build}}}")
        dictionary.write_text("a 1\n")
        return [audit, dictionary]

    cmd = queue_cli.Command(_suite([]), "doc", results=str(results), work=str(tmp_path / "w"),
                            budget="tiny", items=lambda args: [queue.Item("a", 1)],
                            render=lambda args: "", prepare=prepare)
    queue.write_result(queue.result_path(str(results), "a", 1), {"name": "a", "seed": 1})
    for prepare.build in (1, 1, 2):  # a first worker, the same build again, a rebuild
        assert queue_cli.main(cmd, ["run", "--data", "corpus-dir", "--commit"]) == 0
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s", "--name-only"],
                         capture_output=True, text=True).stdout.split("\n")
    assert [l for l in log if l] == [
        "t: corpus snapshot of corpus-dir (audit.json)", "results/corpus/audit.json",
        "t: a_s1", "results/runs/a_s1.json",
        "t: corpus snapshot of corpus-dir (audit.json, dict.txt)",
        "results/corpus/audit.json", "results/corpus/dict.txt"]


def test_a_run_state_file_that_is_not_json_stops_with_its_path(tmp_path):
    """A failure record that cannot be read is as good as none (the item is retried); a run's
    own plan.json or done.json that cannot be read is never guessed at."""
    bad = tmp_path / "failed.json"
    bad.write_text("{trunc", encoding="utf-8")
    assert queue.read_json(bad) is None and queue.read_json(tmp_path / "none.json") is None
    assert queue.read_json(tmp_path / "none.json", strict=True) is None
    with pytest.raises(SystemExit) as e:
        queue.read_json(bad, strict=True)
    assert str(e.value).startswith(f"{bad}: unreadable (JSONDecodeError") and "\n" not in str(e.value)
    from harness.configs import CONFIGS, load_budget
    from harness.runs import Run

    run = Run(CONFIGS[0], load_budget("tiny"), str(tmp_path / "data"), str(tmp_path / "out"))
    os.makedirs(run.dir)
    assert run.state() == "new"
    (Path(run.dir) / "plan.json").write_text("{trunc", encoding="utf-8")
    with pytest.raises(SystemExit, match="plan.json: unreadable"):
        run.state()


def test_a_record_is_never_written_through_a_link_at_a_temporary_name(tmp_path):
    """Issue 57, data loss 4: a link planted at ``runs/<item>.tmp`` leaves its target alone."""
    victim = tmp_path / "thesis.tex"
    victim.write_text("the user's own\n")
    path = queue.result_path(str(tmp_path / "r"), "a", 1)
    path.parent.mkdir(parents=True)
    path.with_suffix(".tmp").symlink_to(victim)
    queue.write_result(path, {"name": "a", "seed": 1})
    assert victim.read_text() == "the user's own\n"
    assert json.loads(path.read_text()) == {"name": "a", "seed": 1} and not path.is_symlink()
    assert sorted(p.name for p in path.parent.iterdir()) == ["a_s1.json", "a_s1.tmp"]


def test_a_truncated_result_record_is_no_result_and_the_item_runs_again(tmp_path):
    """Issue 57, silent 7: a truncated record does not count as done; plan says so."""
    calls = []
    ctx = queue.Context("", str(tmp_path / "w"), str(tmp_path / "r"), "tiny",
                        progress=lambda m: None)
    path = queue.result_path(ctx.results, "a", 1)
    path.parent.mkdir(parents=True)
    path.write_text('{"name": "a", "se')
    item = queue.Item("a", 1)
    assert queue.state(item, ctx) == (f"todo: {path} is not a whole record; the next worker "
                                      "runs the item again")
    assert queue.work(_suite(calls), [item], ctx) == ["a_s1"] and calls == ["a_s1"]
    assert json.loads(path.read_text()) == {"name": "a", "seed": 1, "value": 1,
                                            "finished": json.loads(path.read_text())["finished"]}
    assert queue.state(item, ctx) == "done"


def _repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for key, value in GIT_IDENTITY.items():
        monkeypatch.setenv(key, value)
    return repo


def _killed_commit(repo: Path) -> int:
    """What a queue commit killed with SIGKILL inside git leaves: git's index.lock, and the
    queue's mark naming the git process, now gone; returns its pid."""
    gone = subprocess.Popen(["sleep", "60"])
    queue.write_result(repo / ".git" / queue.COMMIT_MARK,
                       {"pid": gone.pid, "start": child.start_time(gone.pid), "time": time.time()})
    (repo / ".git" / "index.lock").write_text("")
    gone.kill()
    gone.wait()
    return gone.pid


def test_a_stale_index_lock_of_a_killed_queue_commit_is_removed_and_the_commit_made(
        tmp_path, monkeypatch):
    """Issue 57: after a kill -9 during a queue commit the next worker commits at once."""
    repo = _repo(tmp_path, monkeypatch)
    pid, lock = _killed_commit(repo), repo / ".git" / "index.lock"
    (repo / "a.json").write_text("{}")
    said = []
    monkeypatch.setattr(queue.time, "sleep", lambda s: pytest.fail("waited for a stale lock"))
    assert queue.commit([repo / "a.json"], "run a", str(repo), progress=said.append)
    assert not lock.exists() and not (repo / ".git" / queue.COMMIT_MARK).exists()
    assert said == [f"[queue] removed {lock}: left by a queue commit whose git process ({pid}) "
                    "was killed"]
    assert subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], capture_output=True,
                          text=True).stdout.split() == ["run", "a"]


def test_an_index_lock_of_another_program_is_left_and_the_worker_exits_non_zero(
        tmp_path, monkeypatch, capsys):
    """A lock the queue did not leave (no mark of a dead queue commit) is not removed; the
    worker that could not commit says so and exits non-zero."""
    repo = _repo(tmp_path, monkeypatch)
    lock = repo / ".git" / "index.lock"
    lock.write_text("")  # another program's git, live or not: not the queue's to judge
    slept = []
    monkeypatch.setattr(queue.time, "sleep", slept.append)  # its 10 tries, without the waits
    results = repo / "results"
    cmd = queue_cli.Command(_suite([]), "doc", results=str(results), work=str(tmp_path / "w"),
                            budget="tiny", items=lambda args: [queue.Item("a", 1)],
                            render=lambda args: "")
    assert queue_cli.main(cmd, ["run", "--data", "corpus-dir", "--commit"]) == 1
    err = capsys.readouterr().err
    assert "1 commit(s) failed, nothing of them is committed: t: a_s1" in err
    assert slept == [3] * 9 and lock.exists() and not queue.clear_stale_lock(str(repo))
    assert subprocess.run(["git", "-C", str(repo), "log"], capture_output=True).returncode != 0


def test_a_corrupt_record_stops_render_and_commit_with_one_line_naming_it(tmp_path, monkeypatch):
    """Issue 57: ``budget render`` and ``run --commit`` on a corrupt record."""
    from harness import budget_report

    results = tmp_path / "results"
    (results / "corpus").mkdir(parents=True)
    (results / "corpus" / "audit.json").write_text('{"splits": {"test": {}}}')
    (results / "corpus" / "test.ref").write_text("a\n")
    (results / "runs").mkdir()
    bad = results / "runs" / "vanilla_s1.json"
    bad.write_text('{"name": "vanilla", "se')
    with pytest.raises(SystemExit) as e:
        budget_report.render(str(results))
    assert str(e.value).startswith(f"{bad}: not a whole JSON record (JSONDecodeError")
    assert "\n" not in str(e.value)
    repo = _repo(tmp_path, monkeypatch)
    ctx = queue.Context("", str(tmp_path / "w"), str(repo / "results"), "budget_curve",
                        progress=lambda m: None, commit_repo=str(repo))
    queue.write_result(queue.result_path(ctx.results, "vanilla", 1),
                       {"name": "vanilla", "seed": 1, "test": {"hypotheses": "h"}})
    milestone = budget_curve.milestone_path(ctx.results, "vanilla", 1, 1000)
    milestone.parent.mkdir(parents=True)
    milestone.write_text("{")
    with pytest.raises(SystemExit) as e:
        queue.work(budget_curve.SUITE, [queue.Item("vanilla", 1)], ctx)
    assert str(e.value).startswith(f"{milestone}: not a whole JSON record")
