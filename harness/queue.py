"""The one run queue of every experiment suite: items, claims, result files, commits and the
restartable worker loop.

A suite (:class:`Suite`) declares its items (a configuration name, a seed, optionally the
result files it waits for), how one item is run (its ``run`` hook returns the result dict)
and which files a finished item commits. :func:`work` is the worker: it takes every item that
is neither finished (``RESULTS/runs/<item>.json`` holds a whole record) nor held by another
worker, runs it, writes its result file at once and, with a repository, commits exactly its
files (:meth:`Context.commit`, the one committer). Start one
worker per core; they share the queue through ``WORK/claims``.

Reliability, for workers that can be killed at any moment (each case with its test:
docs/reliability.md):

* a claim is a POSIX record lock (``fcntl.lockf``) on ``WORK/claims/<item>``, held for the
  whole run: the kernel releases it when its holder dies, however it dies, so there is no
  stale claim to judge and no window in which two workers both hold one (claim files are
  never deleted: a deleted, still-locked file would let a second worker lock a new file of the
  same name). Not ``flock``: an ``flock`` belongs to the open file, which a forked child
  (fairseq's data-loader worker while a milestone is decoded) shares, so a killed worker's
  claim outlived it until that child noticed; a record lock belongs to the process alone;
* the holder re-checks the result file after locking, so an item finished by a worker that
  released the lock a moment earlier is not run twice;
* the fairseq-train child dies with its worker and writes its own log into the run directory
  (:mod:`~harness.training`, :mod:`~harness.child`),
  so a restarted worker records what the child did, from that log and the checkpoint;
* a failed item gets ``WORK/failed/<item>.json`` (its error; not a result); a later worker
  tries it again;
* a result written but not committed (a worker killed in between) is committed by the next
  worker with a repository; an ``index.lock`` left by a queue commit killed inside git is
  removed by the next commit (:func:`clear_stale_lock`), and a worker whose commit failed
  says so and exits non-zero;
* a truncated result record is no result: the item runs again and replaces it.
"""

import contextlib
import errno
import fcntl
import functools
import json
import os
import subprocess
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple


#: inside :func:`claim`, between opening and locking, sleep SECONDS or wait ``until:FILE``
#: exists (tests inject races with it)
CLAIM_DELAY_ENV = "FAIRSEQ_SHARED_CLAIM_DELAY"


@dataclass(frozen=True)
class Item:
    """One unit of a suite: a configuration ``name`` trained with ``seed``; ``needs`` are
    result files that must exist before it can run (items of this or another suite)."""
    name: str
    seed: int
    needs: Tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return item_id(self.name, self.seed)

    def waits_for(self) -> List[str]:
        return [n for n in self.needs if not Path(n).exists()]


def item_id(name: str, seed: int) -> str:
    return f"{name}_s{seed}"


def result_path(results: str, name: str, seed: int) -> Path:
    return Path(results) / "runs" / f"{item_id(name, seed)}.json"


def failure_path(work: str, ident: str) -> Path:
    return Path(work) / "failed" / f"{ident}.json"


def write_result(path: Path, result: Dict) -> None:
    """The one writer of the suites' JSON records (results, milestones, failures, measured
    rates): :func:`fairseq_shared.checkpoint_io.atomic_write` (a fresh temporary name beside
    it, then replace), so a reader sees the old file or the whole new one and a link planted
    at a fixed temporary name is never written through."""
    from fairseq_shared.checkpoint_io import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1, default=str) + "\n"
    atomic_write(str(path), lambda f: f.write(text.encode("utf-8")))


def read_json(path: Path, strict: bool = False) -> Optional[Dict]:
    """The record at ``path``, None where there is none. An unreadable one is None too, or
    with ``strict`` (a run's own state, which must not be guessed) one line naming the file."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        if strict:
            raise SystemExit(f"{path}: unreadable ({type(e).__name__}: {e}); move it away to "
                             "train the run again") from None
        return None
    if not isinstance(record, dict):
        if strict:
            raise SystemExit(f"{path}: not a JSON object; move it away to train the run again")
        return None
    return record


def read_record(path: Path) -> Dict:
    """A committed record the tables or a commit read: the whole JSON object, else one line
    naming the file (a truncated or hand-broken record is never half-read)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: not a whole JSON record ({type(e).__name__}: {e}); restore "
                         "it (git checkout -- PATH) or move it away") from None
    if not isinstance(record, dict):
        raise SystemExit(f"{path}: not a JSON object; restore it (git checkout -- PATH) or "
                         "move it away")
    return record


def finished(path: Path) -> bool:
    """Whether ``path`` holds a whole result record: a truncated or unreadable one is no
    result (the item runs again and replaces it; ``plan`` says so)."""
    return read_json(path) is not None


def _injected_delay(value: Optional[str]) -> None:
    if not value:
        return
    if value.startswith("until:"):
        while not os.path.exists(value[len("until:"):]):
            time.sleep(0.05)
    else:
        time.sleep(float(value))


def _lock(fd: int) -> bool:
    """Lock the open claim file ``fd`` without waiting: False if another process holds it."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


@contextlib.contextmanager
def claim(work: str, ident: str, finished: Callable[[], bool] = lambda: False):
    """Hold the item ``ident`` for the ``with`` body: yields True if this process holds it,
    False if another live process does or it was ``finished`` by the time the lock came."""
    path = Path(work) / "claims" / ident
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _injected_delay(os.environ.get(CLAIM_DELAY_ENV))
        if not _lock(fd) or finished():  # finished: by a holder that released it meanwhile
            yield False
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # for people; the lock is what counts
        yield True
    finally:
        os.close(fd)  # releases the lock


def held_elsewhere(work: str, ident: str) -> bool:
    """Whether a live process holds the claim of ``ident`` (this one does not). It takes the
    lock for an instant, so only ``plan`` asks: a worker claiming at that instant would skip
    the item for one pass."""
    path = Path(work) / "claims" / ident
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        return not _lock(fd)
    finally:
        os.close(fd)


#: in the repository's git directory while a queue commit runs git: that git process (pid and
#: kernel start time) and when it started. A later commit that finds ``index.lock`` left while
#: that process ran, and the process gone, knows the lock is a killed commit's of its own
COMMIT_MARK = "harness-queue-commit.json"
#: how long one git command of a commit may hold the lock it takes (seconds)
LOCK_WINDOW = 120


def _git_dir(repo: str) -> Path:
    out = subprocess.run(["git", "-C", repo, "rev-parse", "--absolute-git-dir"],
                         capture_output=True, text=True)
    return Path(out.stdout.strip()) if out.returncode == 0 else Path(repo) / ".git"


def clear_stale_lock(repo: str, progress=print) -> bool:
    """Remove ``index.lock`` if a queue commit whose git process is gone left it (a kill -9
    during the commit); a lock of any other program is left alone. True if one was removed."""
    from harness.child import start_time

    git_dir = _git_dir(repo)
    lock, mark = git_dir / "index.lock", git_dir / COMMIT_MARK
    mine = read_json(mark)
    if not lock.exists() or not mine or start_time(mine["pid"]) == mine["start"]:
        return False
    if not mine["time"] - 1 <= lock.stat().st_mtime <= mine["time"] + LOCK_WINDOW:
        return False  # taken before or long after that commit: another program's
    lock.unlink()
    mark.unlink()
    progress(f"[queue] removed {lock}: left by a queue commit whose git process "
             f"({mine['pid']}) was killed")
    return True


def _git(repo: str, *args: str) -> int:
    """Run one git command of a commit, marked as the queue's (:data:`COMMIT_MARK`)."""
    from harness.child import start_time

    mark = _git_dir(repo) / COMMIT_MARK
    proc = subprocess.Popen(["git", "-C", repo, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    write_result(mark, {"pid": proc.pid, "start": start_time(proc.pid), "time": time.time()})
    rc = proc.wait()
    mark.unlink(missing_ok=True)
    return rc


def commit(paths: Sequence[Path], message: str, repo: str, tries: int = 10,
           progress=print) -> bool:
    """``git commit`` exactly these paths (other work in the tree is left alone); a stale
    ``index.lock`` of a killed queue commit is removed first (:func:`clear_stale_lock`),
    another holder of the lock is waited for, ``tries`` times 3 seconds."""
    rel = [os.path.relpath(os.path.abspath(p), repo) for p in paths]
    for attempt in range(tries):
        clear_stale_lock(repo, progress)
        if (_git(repo, "add", "--", *rel) == 0
                and _git(repo, "commit", "-q", "-m", message, "--", *rel) == 0):
            return True
        if attempt + 1 < tries:
            time.sleep(3)  # another process holds the index lock
    return False


def uncommitted(paths: Sequence[Path], repo: str) -> bool:
    rel = [os.path.relpath(os.path.abspath(p), repo) for p in paths]
    out = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--", *rel],
                         capture_output=True, text=True)
    return bool(out.stdout.strip())


def results_repository(results: str) -> str:
    os.makedirs(results, exist_ok=True)
    top = subprocess.run(["git", "-C", results, "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True)
    if top.returncode != 0:
        raise SystemExit(f"--commit: {results} is not inside a git repository")
    return top.stdout.strip()


@dataclass
class Context:
    """Where a worker runs: the corpus, its work and results directories, the budget."""
    data: str
    work: str
    results: str
    budget: str
    overrides: Sequence[str] = ()
    progress: Callable[[str], None] = print
    commit_repo: Optional[str] = None
    extra: Dict = field(default_factory=dict)  # suite-specific directories
    not_committed: List[str] = field(default_factory=list)  # messages of failed commits

    def commit(self, paths: Sequence[Path], message: str) -> None:
        """The one committer of a worker (the corpus snapshot, each milestone, each finished
        item): commits ``paths`` where they differ from the repository, nothing without
        ``--commit``; a commit that fails is said and kept in :attr:`not_committed`, so the
        worker exits non-zero (:func:`harness.queue_cli.main`)."""
        if not self.commit_repo or not uncommitted(paths, self.commit_repo):
            return
        if commit(paths, message, self.commit_repo, progress=self.progress):
            self.progress(f"[queue] committed: {message}")
        else:
            self.not_committed.append(message)
            self.progress(f"[queue] could not commit: {message}")


@dataclass
class Suite:
    """A declaration: ``run(item, ctx) -> result`` trains and evaluates one item (its result
    file is written by the queue); ``commit_files(item, result, ctx) -> (paths, message)``
    names what a finished item commits besides its result file."""
    tag: str
    run: Callable[[Item, Context], Dict]
    commit_files: Callable[[Item, Dict, Context], Tuple[List[Path], str]]


def work_pairs(suite: Suite, pairs: Sequence[Tuple[str, int]], data: str, work_dir: str,
               results: str, budget: str, overrides: Sequence[str] = (),
               commit_repo: Optional[str] = None, progress=print) -> List[str]:
    ctx = Context(data, work_dir, results, budget, overrides, progress, commit_repo)
    return work(suite, [Item(n, s) for n, s in pairs], ctx)


def _commit(suite: Suite, item: Item, result: Dict, ctx: Context) -> None:
    paths, message = suite.commit_files(item, result, ctx)
    ctx.commit([result_path(ctx.results, item.name, item.seed), *paths], message)


def state(item: Item, ctx: Context) -> str:
    """done / failed: ERROR / running / waits for ... / todo (for ``plan``)."""
    path = result_path(ctx.results, item.name, item.seed)
    if finished(path):
        return "done"
    if held_elsewhere(ctx.work, item.id):
        return "running (claimed by a live worker)"
    need = item.waits_for()
    if need:
        return f"waits for {', '.join(need)}"
    failed = read_json(failure_path(ctx.work, item.id))
    if failed:
        return f"failed: {failed['error']} (retried by the next worker)"
    if path.exists():
        return f"todo: {path} is not a whole record; the next worker runs the item again"
    return "todo"


def work(suite: Suite, items: Sequence[Item], ctx: Context) -> List[str]:
    """The worker loop; returns the ids this worker finished."""
    done, failed, checked = [], set(), set()
    while True:
        ran = False
        for item in items:
            path = result_path(ctx.results, item.name, item.seed)
            if finished(path):
                if ctx.commit_repo and item.id not in checked:  # killed before its commit
                    checked.add(item.id)
                    _commit(suite, item, read_record(path), ctx)
                continue
            if item.id in failed or item.waits_for():
                continue
            with claim(ctx.work, item.id, finished=functools.partial(finished, path)) as held:
                if not held:
                    continue
                ran = True
                result = _run_one(suite, item, ctx)
                if result is None:
                    failed.add(item.id)
                    continue
                write_result(path, result)
                failure_path(ctx.work, item.id).unlink(missing_ok=True)
            done.append(item.id)
            checked.add(item.id)
            _commit(suite, item, result, ctx)
        if not ran:
            break
    for item in items:  # what is left (said without probing the claims other workers take)
        if finished(result_path(ctx.results, item.name, item.seed)):
            continue
        need = item.waits_for()
        why = (f"failed, see {failure_path(ctx.work, item.id)}" if item.id in failed else
               f"waits for {', '.join(need)}" if need else "held by another worker")
        ctx.progress(f"[{suite.tag}] {item.id}: left, {why}")
    return done


def failed_items(items: Sequence[Item], ctx: Context) -> List[Item]:
    """The items without a result whose last run failed (their ``failed/`` record stands)."""
    return [item for item in items
            if not finished(result_path(ctx.results, item.name, item.seed))
            and failure_path(ctx.work, item.id).exists()]


def _run_one(suite: Suite, item: Item, ctx: Context) -> Optional[Dict]:
    try:
        result = suite.run(item, ctx)
    except Exception as e:  # noqa: BLE001  one item's failure must not stop the queue
        write_result(failure_path(ctx.work, item.id), {
            "item": item.id, "error": f"{type(e).__name__}: {e}".splitlines()[0],
            "traceback": traceback.format_exc(), "failed": time.strftime("%Y-%m-%d %H:%M:%S")})
        ctx.progress(f"[{suite.tag}] {item.id} failed: {type(e).__name__}: {e}; recorded in "
                     f"{failure_path(ctx.work, item.id)}; going on with the next item")
        return None
    result.setdefault("finished", time.strftime("%Y-%m-%d %H:%M:%S"))
    return result
