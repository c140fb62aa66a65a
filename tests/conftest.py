"""Marks as ``slow`` every test that starts a fairseq process, torchrun, a corpus build or a
fresh virtual environment, so that ``make test-fast`` (``-m "not slow"``) can leave them out;
``make test`` runs everything.

A test is slow when its function, or a fixture it uses, calls a *spawner*. The spawners are
the calls below, and any function of ``tests/helpers_*.py`` whose body calls a spawner (to a
fixed point). The rule reads the source, so a new test that trains a model is marked without
anyone remembering to.
"""

import ast
import inspect
import os
import textwrap
from pathlib import Path

import pytest

from helpers_env import pythonpath

# every process the suite spawns starts with fairseq's scikit-learn and SciPy imports deferred
# (tests/deferred_imports/sitecustomize.py); a test that sets PYTHONPATH itself uses pythonpath()
os.environ["PYTHONPATH"] = pythonpath(
    *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))

SPAWNING_MODULES = {"subprocess", "helpers_forkserver"}  # subprocess.run, .Popen, ...; forked runs
BASE_SPAWNERS = {"run_tool", "fairseq_command", "fairseq_tool", "build_toy_corpus"}
# library calls that start fairseq-train or a corpus build themselves, as module.function(...)
# (``train`` only as a bare name: ``model.train()`` is not one)
LIBRARY_SPAWNERS = {"work_pairs", "prepare", "run_item", "build_corpus", "main_job"}


def _called_names(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                yield f.id, None
            elif isinstance(f, ast.Attribute):
                owner = f.value.id if isinstance(f.value, ast.Name) else None
                yield f.attr, owner


def _spawns(tree, spawners) -> bool:
    for name, owner in _called_names(tree):
        if owner in SPAWNING_MODULES or (owner is None and name in spawners):
            return True
        if owner is not None and owner.startswith("helpers") and name in spawners:
            return True
        if owner is not None and owner not in ("self", "model") and name in LIBRARY_SPAWNERS:
            return True
    return False


def _functions(path: Path):
    return {n.name: n for n in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(n, ast.FunctionDef)}


def _fixed_point(functions, spawners):
    spawners = set(spawners)
    changed = True
    while changed:
        changed = False
        for name, node in functions.items():
            if name not in spawners and _spawns(node, spawners):
                spawners.add(name)
                changed = True
    return spawners


HELPERS = {}
for _path in Path(__file__).parent.glob("helpers_*.py"):
    HELPERS.update(_functions(_path))
HELPER_SPAWNERS = _fixed_point(HELPERS, BASE_SPAWNERS)
_module_spawners = {}


def spawners_of(module_path: str):
    """The spawners a test module can call: the helpers' and its own functions'."""
    if module_path not in _module_spawners:
        _module_spawners[module_path] = _fixed_point(_functions(Path(module_path)),
                                                     HELPER_SPAWNERS)
    return _module_spawners[module_path]


_parsed = {}  # function -> its syntax tree (None: no source): items share their fixtures


def _source_spawns(obj, spawners) -> bool:
    if obj not in _parsed:
        try:
            _parsed[obj] = ast.parse(textwrap.dedent(inspect.getsource(obj)))
        except (OSError, TypeError, SyntaxError):
            _parsed[obj] = None
    return _parsed[obj] is not None and _spawns(_parsed[obj], spawners)


def _spawning(item) -> bool:
    spawners = spawners_of(str(item.path))
    if _source_spawns(getattr(item, "function", None), spawners):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for d in defs:
            module = inspect.getsourcefile(d.func) or ""
            if _source_spawns(d.func, spawners_of(module) if module.endswith(".py")
                              and "/tests/" in module else HELPER_SPAWNERS):
                return True
    return False


# The heaviest test files (seconds of test time in a profile of the whole suite, most first).
# ``--dist loadfile`` hands the files to the xdist workers in collection order, so these
# start first and the many light files fill the workers' gaps at the end, instead of one
# heavy file starting last on one worker while the other idles.
HEAVY_FIRST = (
    "test_gpu_bundle.py", "test_timing.py", "test_budget_curve.py", "test_quickstart.py", "test_export.py",
    "test_distill_safety.py", "test_export_clients.py", "test_readme_table.py", "test_distill.py",
    "test_trace.py", "test_queue.py", "test_half_precision.py", "test_install.py",
    "test_torn_resume.py", "test_export_hf.py", "test_main_job.py", "test_shared_lm.py",
    "test_audit.py", "test_hf_shared.py", "test_evidence.py", "test_dead_code.py",
    "test_scripting.py", "test_end_to_end.py", "test_frontier.py", "test_flags.py",
)


def _heavy_rank(item) -> int:
    name = item.path.name
    return HEAVY_FIRST.index(name) if name in HEAVY_FIRST else len(HEAVY_FIRST)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "slow" not in item.keywords and _spawning(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_heavy_rank)  # stable: a file's tests keep their order


@pytest.fixture(scope="session", autouse=True)
def _harness_runs_forked():
    """The harness's fairseq-train and fairseq-validate runs started in a test's own process
    are forks of the suite's fork server (tests/helpers_forkserver.py); a test that measures
    how they run takes the real ``subprocess`` back (tests/test_thread_rate.py)."""
    from helpers_forkserver import harness_runs

    with harness_runs():
        yield
