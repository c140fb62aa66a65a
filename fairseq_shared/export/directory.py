"""The export owns its ``--out`` directory (issue 38, item 1).

Everything is written into a fresh directory beside ``--out`` (``.NAME.export-XXXX``) and
moved into place only once the export is checked (:func:`staged`): an interrupted or failed
export leaves the previous complete export, or nothing, under the final name, and never
writes into (or through a symlink in) what is there. ``--out`` may hold only the files an
earlier export's ``export.json`` lists (its ``sha256``) and that ``export.json``; anything else
(a file of the user's beside them, or a stray ``export.json`` that lists no files) is refused,
naming it, unless ``--force`` replaces the directory whole. The new directory gets the user's
umask (``mkdtemp`` makes it 0700). A mount point cannot be renamed, so it is refused before the
work (:func:`refuse_unreplaceable`). A lock beside it (``.NAME.export-lock``) makes a second
concurrent export into the same ``--out`` refuse. ``export.json`` vouches for the files by their
sha256 (:func:`file_hashes`). A write that fails (a full disk) is one line naming the file
(:func:`write_error`).
"""

import contextlib
import errno
import glob
import json
import os
import re
import shutil
import tempfile
from typing import Dict, Iterator, List, Optional, Set

from fairseq_shared import checkpoint_io
from fairseq_shared.export.plain import ExportError
from fairseq_shared.locks import held

REPORT = "export.json"
_STAGING = ".export-staging-"
_OLD = ".export-old-"
_LOCK = ".export-lock"


def _beside(out_dir: str, tail: str) -> str:
    parent, name = os.path.split(os.path.abspath(out_dir).rstrip(os.sep))
    return os.path.join(parent, f".{name}{tail}")


def listed_files(out_dir: str) -> Optional[Set[str]]:
    """The files (relative paths) an earlier export in ``out_dir`` wrote: those its
    ``export.json`` vouches for by sha256, and ``export.json`` itself; None when there is no
    such report, or it lists no files (a stray ``export.json`` is no export)."""
    try:
        with open(os.path.join(out_dir, REPORT)) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return None
    hashes = report.get("sha256") if isinstance(report, dict) else None
    if not isinstance(hashes, dict) or not hashes:
        return None
    return {os.path.normpath(str(name)) for name in hashes} | {REPORT}


def is_earlier_export(out_dir: str) -> bool:
    """Whether ``out_dir`` holds an export this tool wrote (:func:`listed_files`)."""
    return listed_files(out_dir) is not None


def unlisted(out_dir: str, listed: Set[str]) -> List[str]:
    """What ``out_dir`` holds beyond ``listed`` (relative paths; a directory with a ``/``):
    files and links not listed, and directories that hold no listed file."""
    parents = {os.path.dirname(name) for name in listed}
    parents |= {p for name in parents for p in _ancestors(name)}
    extra = []
    for root, dirs, files in os.walk(out_dir):  # never follows a link
        dirs.sort()
        for name in dirs + sorted(files):
            relative = os.path.relpath(os.path.join(root, name), out_dir)
            if name in dirs and not os.path.islink(os.path.join(root, name)):
                if relative not in parents:
                    extra.append(relative + "/")
                    dirs.remove(name)  # named whole, not file by file
            elif relative not in listed:
                extra.append(relative)
    return sorted(extra)


def _ancestors(relative: str) -> List[str]:
    out = []
    while relative:
        out.append(relative)
        relative = os.path.dirname(relative)
    return out


def _shown(names: List[str]) -> str:
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return ", ".join(names[:5]) + more


def refuse_foreign(out_dir: str, force: bool) -> None:
    """Raise :class:`ExportError` unless ``out_dir`` is absent, empty, holds only what an
    earlier export's ``export.json`` lists, or ``force`` is given (then it is replaced whole).
    A symlink is never followed."""
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
    if not names or force:
        return
    listed = listed_files(out_dir)
    if listed is None:
        shown = [n + ("/" if os.path.isdir(os.path.join(out_dir, n)) else "") for n in names]
        why = (f"its {REPORT} lists no files" if REPORT in names else f"no {REPORT}")
        raise ExportError(f"--out {out_dir}: holds {_shown(shown)}, not an earlier export "
                          f"({why}); choose another --out, or pass --force to replace it whole")
    extra = unlisted(out_dir, listed)
    if extra:
        raise ExportError(f"--out {out_dir}: holds {_shown(extra)}, which the earlier export "
                          f"there does not list (its {REPORT}), and the export replaces the "
                          "directory whole; move them out, choose another --out, or pass "
                          "--force to replace it whole")


def refuse_unreplaceable(out_dir: str) -> None:
    """:class:`ExportError` for an ``--out`` the export could not put its result in place of:
    an empty name, or a mount point (a rename of one fails with EBUSY). Checked before any
    work."""
    if not str(out_dir).strip():
        raise ExportError(f"--out {out_dir!r}: names no directory; give the directory to "
                          "write the export into")
    if os.path.isdir(out_dir) and not os.path.islink(out_dir) and os.path.ismount(out_dir):
        raise ExportError(f"--out {out_dir}: is a mount point, which the export cannot "
                          "replace (it writes beside --out and renames the result into "
                          "place); pass a directory inside it")


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
            hashes[relative] = checkpoint_io.file_sha256(path)
    return hashes


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)  # never follows a symlink inside
    elif os.path.lexists(path):
        os.unlink(path)


def _apply_umask(directory: str) -> None:
    umask = os.umask(0)
    os.umask(umask)
    for root, dirs, files in os.walk(directory):
        os.chmod(root, 0o777 & ~umask)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~umask)


def publish(staging: str, out_dir: str) -> None:
    """Put the checked ``staging`` directory in the place of ``out_dir`` (replaced whole:
    moved aside, then removed), its modes the user's umask's (``mkdtemp`` and some writers,
    transformers' among them, make files only their owner reads)."""
    _apply_umask(staging)
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


#: errno values of a full disk (no space, or the user's quota spent)
_FULL = (errno.ENOSPC, errno.EDQUOT)


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _full_disk(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a full disk; a library that does not raise an
    ``OSError`` (safetensors' writer) is known by the operating system's text."""
    for e in _chain(error):
        if isinstance(e, OSError) and e.errno in _FULL:
            return True
        if any(os.strerror(code) in str(e) for code in _FULL):
            return True
    return False


def _newest_file(directory: str) -> Optional[str]:
    """The file under ``directory`` written last (a writer that names no path was writing it
    when it failed)."""
    files = [os.path.join(root, n) for root, _, names in os.walk(directory) for n in names]
    return max(files, key=lambda f: os.lstat(f).st_mtime_ns, default=None)


def write_error(error: BaseException, staging: str, out_dir: str) -> Optional[ExportError]:
    """``error``, raised while the export wrote into ``staging``, as one line that names the
    file being written (as its path in ``out_dir`` will be; a writer that names none: the
    file written last) and the cause; None when it is no write failure. A full disk says so,
    whoever wrote (torch, CTranslate2, transformers, ``shutil``, whose copy names the source
    first: the destination is the one named)."""
    def shown(path) -> Optional[str]:
        path = os.path.abspath(str(path))
        if path == staging or path.startswith(staging + os.sep):
            return out_dir + path[len(staging):]
        return None

    paths = [shown(p) for e in _chain(error) if isinstance(e, OSError)
             for p in (e.filename2, e.filename) if p is not None]
    paths += [shown(m.group()) for e in _chain(error)  # a message that names the file
              for m in [re.search(re.escape(staging) + r"[^\s:;']*", str(e))] if m]
    written = next((p for p in paths if p), None) or shown(_newest_file(staging) or staging)
    unchanged = f"nothing was moved into --out {out_dir} (an earlier export there is kept)"
    if _full_disk(error):
        return ExportError(f"--out {out_dir}: the disk is full, writing {written}: "
                           "No space left on device (ENOSPC); "
                           f"free space there, or choose another --out; {unchanged}")
    os_error = next((e for e in _chain(error) if isinstance(e, OSError)), None)
    if written and os_error is not None:
        return ExportError(f"{written}: cannot write it: {os_error.strerror or os_error}; "
                           f"{unchanged}")
    return None
