"""The export owns its ``--out`` directory (issue 38, item 1).

Everything is written into a fresh directory beside ``--out`` (``.NAME.export-XXXX``) and
moved into place only once the export is checked (:func:`staged`): an interrupted or failed
export leaves the previous complete export, or nothing, under the final name, and never
writes into (or through a symlink in) what is there. ``--out`` may hold only an earlier export
(its ``export.json``); anything else is refused, naming what it holds, unless ``--force``
replaces it whole. A lock beside it (``.NAME.export-lock``) makes a second concurrent export
into the same ``--out`` refuse. ``export.json`` vouches for the files by their sha256
(:func:`file_hashes`).
"""

import contextlib
import glob
import hashlib
import json
import os
import shutil
import tempfile
from typing import Dict, Iterator

from fairseq_shared.export.plain import ExportError
from fairseq_shared.locks import held

REPORT = "export.json"
_STAGING = ".export-staging-"
_OLD = ".export-old-"
_LOCK = ".export-lock"


def _beside(out_dir: str, tail: str) -> str:
    parent, name = os.path.split(os.path.abspath(out_dir).rstrip(os.sep))
    return os.path.join(parent, f".{name}{tail}")


def is_earlier_export(out_dir: str) -> bool:
    """Whether ``out_dir`` holds an export this tool wrote (its ``export.json`` a report)."""
    try:
        with open(os.path.join(out_dir, REPORT)) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and "plain_checkpoint" in report


def refuse_foreign(out_dir: str, force: bool) -> None:
    """Raise :class:`ExportError` unless ``out_dir`` is absent, empty, an earlier export, or
    ``force`` is given (then it is replaced whole). A symlink is never followed."""
    if os.path.islink(out_dir):
        if force:
            return
        raise ExportError(f"--out {out_dir}: is a symlink (to {os.readlink(out_dir)}); the "
                          "export never writes through one: pass the directory itself, or "
                          "--force to replace the link")
    if not os.path.lexists(out_dir):
        return
    if not os.path.isdir(out_dir):
        if force:
            return
        raise ExportError(f"--out {out_dir}: is a file, not a directory; choose another "
                          "--out, or pass --force to replace it")
    names = sorted(os.listdir(out_dir))
    if not names or force or is_earlier_export(out_dir):
        return
    shown = [n + ("/" if os.path.isdir(os.path.join(out_dir, n)) else "") for n in names[:5]]
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    raise ExportError(f"--out {out_dir}: holds {', '.join(shown)}{more}, not an earlier export "
                      f"(no {REPORT}); choose another --out, or pass --force to replace it "
                      "whole")


@contextlib.contextmanager
def locked(out_dir: str) -> Iterator[None]:
    """Hold the lock of ``out_dir``, or raise :class:`ExportError` when another export holds
    it (a kernel lock: released when its holder dies)."""
    path = _beside(out_dir, _LOCK)
    with held(path, f"--out {out_dir}", f"--out {out_dir}: another export into it is running "
              f"(it holds {path}); wait for it to finish, or choose another --out", ExportError):
        yield


def file_hashes(directory: str) -> Dict[str, str]:
    """``{relative path: sha256}`` of every file under ``directory`` but ``export.json``."""
    hashes = {}
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            if relative == REPORT or os.path.islink(path):
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            hashes[relative] = digest.hexdigest()
    return hashes


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)  # never follows a symlink inside
    elif os.path.lexists(path):
        os.unlink(path)


def publish(staging: str, out_dir: str) -> None:
    """Put the checked ``staging`` directory in the place of ``out_dir`` (replaced whole:
    moved aside, then removed)."""
    old = None
    if os.path.lexists(out_dir):
        old = tempfile.mkdtemp(prefix=os.path.basename(_beside(out_dir, _OLD)),
                               dir=os.path.dirname(_beside(out_dir, "")))
        os.rmdir(old)
        os.rename(out_dir, old)
    os.rename(staging, out_dir)
    if old is not None:
        _remove(old)


def _clear_leftovers(out_dir: str) -> None:
    """An interrupted export's staging directory is removed; a previous export moved aside
    by an interrupted :func:`publish` goes back to ``out_dir`` if that is empty."""
    for old in glob.glob(glob.escape(_beside(out_dir, _OLD)) + "*"):
        if not os.path.lexists(out_dir) and is_earlier_export(old):
            os.rename(old, out_dir)
        else:
            _remove(old)
    for staging in glob.glob(glob.escape(_beside(out_dir, _STAGING)) + "*"):
        _remove(staging)


@contextlib.contextmanager
def staged(out_dir: str, force: bool = False) -> Iterator[str]:
    """Under the lock of ``out_dir``, after :func:`refuse_foreign`: a fresh directory beside
    it, removed on the way out unless :func:`publish` moved it into place. Leftovers of an
    interrupted export (its staging directory) are removed first."""
    parent = os.path.dirname(_beside(out_dir, ""))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise ExportError(f"--out {out_dir}: cannot create its parent directory {parent}: "
                          f"{e.strerror or e}")
    with locked(out_dir):
        refuse_foreign(out_dir, force)
        _clear_leftovers(out_dir)
        try:
            staging = tempfile.mkdtemp(prefix=os.path.basename(_beside(out_dir, _STAGING)),
                                       dir=parent)
        except OSError as e:
            raise ExportError(f"--out {out_dir}: cannot write beside it in {parent}: "
                              f"{e.strerror or e}")
        try:
            yield staging
        finally:
            if os.path.lexists(staging):
                _remove(staging)
