"""The ``PYTHONPATH`` of the processes the suite spawns: ``tests/deferred_imports`` first, whose
``sitecustomize`` binds fairseq's scikit-learn and SciPy imports on first use (its docstring
says why), then the folders a test asks for."""

import os
from pathlib import Path

DEFERRED_IMPORTS = str(Path(__file__).resolve().parent / "deferred_imports")


def pythonpath(*folders) -> str:
    return os.pathsep.join([DEFERRED_IMPORTS, *(str(f) for f in folders)])
