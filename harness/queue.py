"""The one run queue of every experiment suite: items, claims, result files, commits and the
restartable worker loop.

A suite (:class:`Suite`) declares its items (a configuration name, a seed, optionally the
result files it waits for), how one item is run (its ``run`` hook returns the result dict)
and which files a finished item commits. :func:`work` is the worker: it takes every item that
is neither finished (``RESULTS/runs/<item>.json`` exists) nor held by another worker, runs it,
writes its result file at once and, with a repository, commits exactly its files. Start one
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
  worker with a repository.
"""

import contextlib
import errno
import fcntl
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
    rates): atomic, a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_json(path: Path, strict: bool = False) -> Optional[Dict]:
    """The record at ``path``, None where there is none. An unreadable one is None too, or
    with ``strict`` (a run's own state, which must not be guessed) one line naming the file."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        if strict:
            raise SystemExit(f"{path}: unreadable ({type(e).__name__}: {e}); move it away to "
                             "train the run again") from None
        return None


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


def commit(paths: Sequence[Path], message: str, repo: str, tries: int = 10) -> bool:
    """``git commit`` exactly these paths (other work in the tree is left alone)."""
    rel = [os.path.relpath(os.path.abspath(p), repo) for p in paths]
    for _ in range(tries):
        add = subprocess.run(["git", "-C", repo, "add", "--", *rel], capture_output=True)
        done = add.returncode == 0 and subprocess.run(
            ["git", "-C", repo, "commit", "-q", "-m", message, "--", *rel],
            capture_output=True).returncode == 0
        if done:
            return True
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


def _commit(suite: Suite, item: Item, result: Dict, ctx: Context, only_if_dirty=False) -> None:
    paths, message = suite.commit_files(item, result, ctx)
    paths = [result_path(ctx.results, item.name, item.seed), *paths]
    if only_if_dirty and not uncommitted(paths, ctx.commit_repo):
        return
    ok = commit(paths, message, ctx.commit_repo)
    ctx.progress(f"[{suite.tag}] {'committed' if ok else 'could not commit'} {item.id}")


def state(item: Item, ctx: Context) -> str:
    """done / failed: ERROR / running / waits for ... / todo (for ``plan``)."""
    if result_path(ctx.results, item.name, item.seed).exists():
        return "done"
    if held_elsewhere(ctx.work, item.id):
        return "running (claimed by a live worker)"
    need = item.waits_for()
    if need:
        return f"waits for {', '.join(need)}"
    failed = read_json(failure_path(ctx.work, item.id))
    if failed:
        return f"failed: {failed['error']} (retried by the next worker)"
    return "todo"


def work(suite: Suite, items: Sequence[Item], ctx: Context) -> List[str]:
    """The worker loop; returns the ids this worker finished."""
    finished, failed, checked = [], set(), set()
    while True:
        ran = False
        for item in items:
            path = result_path(ctx.results, item.name, item.seed)
            if path.exists():
                if ctx.commit_repo and item.id not in checked:  # killed before its commit
                    checked.add(item.id)
                    _commit(suite, item, read_json(path) or {}, ctx, only_if_dirty=True)
                continue
            if item.id in failed or item.waits_for():
                continue
            with claim(ctx.work, item.id, finished=path.exists) as held:
                if not held:
                    continue
                ran = True
                result = _run_one(suite, item, ctx)
                if result is None:
                    failed.add(item.id)
                    continue
                write_result(path, result)
                failure_path(ctx.work, item.id).unlink(missing_ok=True)
            finished.append(item.id)
            checked.add(item.id)
            if ctx.commit_repo:
                _commit(suite, item, result, ctx)
        if not ran:
            break
    for item in items:  # what is left (said without probing the claims other workers take)
        if result_path(ctx.results, item.name, item.seed).exists():
            continue
        need = item.waits_for()
        why = (f"failed, see {failure_path(ctx.work, item.id)}" if item.id in failed else
               f"waits for {', '.join(need)}" if need else "held by another worker")
        ctx.progress(f"[{suite.tag}] {item.id}: left, {why}")
    return finished


def failed_items(items: Sequence[Item], ctx: Context) -> List[Item]:
    """The items without a result whose last run failed (their ``failed/`` record stands)."""
    return [item for item in items
            if not result_path(ctx.results, item.name, item.seed).exists()
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
