"""Loaded at start-up by every Python process the test suite spawns (``conftest.py`` puts this
folder first on ``PYTHONPATH``); nothing outside the suite sees it.

fairseq 0.12 imports scikit-learn and ``scipy.stats`` when it starts, for one criterion
(``sentence_prediction``) and one task (``audio_classification``) that no test uses. That is
about a third of a fairseq process's start-up, and the suite starts several hundred. Here those
modules are bound on first use instead: an attribute taken from them is a stand-in that imports
the real module the first time it is called or read, so whatever does use them gets the real
functions (``tests/test_deferred_imports.py`` checks both).
"""

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types

DEFERRED = ("sklearn", "scipy.stats")


def _deferred(name: str) -> bool:
    return any(name == d or name.startswith(d + ".") for d in DEFERRED)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    active = True

    def find_spec(self, name, path=None, target=None):
        if self.active and _deferred(name):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _DeferredModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


_FINDER = _Finder()


def _real(module_name: str):
    """The real module: every stand-in leaves ``sys.modules`` and the finder stops, once."""
    if _FINDER.active:
        _FINDER.active = False
        for name in [n for n, m in sys.modules.items() if isinstance(m, _DeferredModule)]:
            del sys.modules[name]
    return importlib.import_module(module_name)


class _Attribute:
    """``module.name`` of a deferred module, looked up when first used."""

    def __init__(self, module_name: str, name: str):
        self._where = (module_name, name)
        self._value = None

    def _resolve(self):
        if self._value is None:
            module_name, name = self._where
            try:
                self._value = getattr(_real(module_name), name)
            except AttributeError:  # a submodule not yet imported by its package
                self._value = _real(f"{module_name}.{name}")
        return self._value

    def __call__(self, *args, **kwargs):
        return self._resolve()(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._resolve(), name)


class _DeferredModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Attribute(self.__name__, name)


sys.meta_path.insert(0, _FINDER)


def _log_spawn(path: str) -> None:
    """With ``FAIRSEQ_SHARED_SPAWN_LOG=FILE``, each spawned process appends one JSON line at
    exit: its command, parent, wall and CPU seconds, and whether it imported torch (what a
    start-up costs the suite, counted instead of guessed)."""
    import atexit
    import json
    import time

    start = time.time()

    def write():
        times = os.times()
        line = {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.orig_argv[1:6],
                "wall": round(time.time() - start, 2), "cpu": round(times.user + times.system, 2),
                "torch": "torch" in sys.modules, "fairseq": "fairseq" in sys.modules}
        try:
            with open(path, "a") as f:
                f.write(json.dumps(line) + "\n")
        except OSError:  # a diagnostic never changes how a process ends (a test's RLIMIT_FSIZE)
            pass

    atexit.register(write)


if os.environ.get("FAIRSEQ_SHARED_SPAWN_LOG"):
    _log_spawn(os.environ["FAIRSEQ_SHARED_SPAWN_LOG"])
