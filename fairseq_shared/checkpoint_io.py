"""Reading and writing checkpoint files: the one place every tool (and, through
:mod:`fairseq_shared.compat`, fairseq's own commands) loads, checks and saves them.

* :func:`load` reads a fairseq checkpoint through fairseq's ``load_checkpoint_to_cpu`` (safe
  ``weights_only`` loading, the types :mod:`fairseq_shared.compat` allows); :func:`load_raw`
  reads one as stored, without fairseq's upgrades (averaging). A file that cannot be read
  (missing, empty, truncated, not a PyTorch file, or refused by safe loading) raises
  :class:`CheckpointError` naming the file and what is wrong with it; the advice to load
  unsafely that PyTorch's own message carries is never passed on. A model holding a NaN or an
  infinity is refused, naming the file and the tensor (:class:`NonFiniteError`). With
  ``expect`` the kind of model is checked too (a language model given to a translation tool,
  or the reverse).
* :func:`setup_task` builds the checkpoint's task, and says to pass ``--data`` when the
  dictionaries are no longer where the checkpoint's configuration says.
* :func:`save` writes atomically (:func:`atomic_write`, the one atomic writer: a full or
  read-only disk is one :class:`CheckpointError` naming the path and the cause, and leaves
  the old file), and refuses weights that are not finite (:func:`refuse_non_finite`); every
  other file of the package is written through it too (:func:`write_text`,
  :func:`copy_file`).
* :func:`refuse_overwrite` stops a tool, before any work, whose output would replace one of
  its inputs.
* :func:`intact` and :func:`newest_intact` find, among a save directory's checkpoints, the
  newest one that is whole (a resume falls back to it when ``checkpoint_last.pt`` is torn).

Opening a checkpoint's model for a tool, and the configuration of a checkpoint a tool
rebuilt, are :mod:`fairseq_shared.tools.checkpoints`, on top of this module.
"""

import enum
import glob
import os
import pickle
import re
import struct
import tempfile
import zipfile
import zlib
from typing import Iterable, Optional, Sequence, Tuple

from fairseq_shared.errors import FairseqSharedError

#: Environment variable that keeps the underlying exception (and tracebacks) visible.
DEBUG_ENV = "FAIRSEQ_SHARED_DEBUG"

#: ``expect`` values, and how each is described; a checkpoint's kind is its task's.
KINDS = {"translation": "translation", "language_model": "language model"}

#: The first bytes of the two PyTorch file formats: a zip archive, and the legacy format
#: (pickles, the first of torch's magic number 0x1950a86a20f9469cfc6c; protocol 2 by default).
_ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"


class CheckpointError(FairseqSharedError):
    """A checkpoint file cannot be used; the message names the file and says why."""


class NonFiniteError(CheckpointError):
    """A checkpoint's model holds a NaN or an infinity (a whole file, not a torn one: a resume
    does not skip it for an older checkpoint)."""


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _error(message: str, cause: Optional[BaseException] = None) -> CheckpointError:
    error = CheckpointError(message)
    # without --debug the cause is hidden: PyTorch's own message advises weights_only=False
    error.__cause__ = cause if debug_enabled() else None
    error.__suppress_context__ = True
    return error


# ---------------------------------------------------------------------------- reading
def check_readable(path: str) -> None:
    """Raise :class:`CheckpointError` unless ``path`` looks like a whole PyTorch file
    (reads only its first bytes and, for a zip archive, its directory)."""
    if not os.path.exists(path):
        raise _error(f"{path}: no such checkpoint file")
    if os.path.isdir(path):
        raise _error(f"{path}: is a directory, not a checkpoint file")
    size = os.path.getsize(path)
    if size == 0:
        raise _error(f"{path}: the checkpoint file is empty (0 bytes; a save or copy of it "
                     "was interrupted)")
    with open(path, "rb") as f:
        head = f.read(len(_LEGACY_MAGIC))
    if head.startswith(_ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise _error(f"{path}: the checkpoint file is truncated or corrupt ({size} bytes, "
                         "its zip directory is unreadable; a save or copy of it was "
                         "interrupted)", e)
        if not any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
            raise _error(f"{path}: a zip archive, but not a PyTorch checkpoint (no data.pkl)")
        _check_crc(path, size)
    elif not head.startswith(b"\x80"):  # a pickle (the legacy format, any protocol)
        raise _error(f"{path}: not a PyTorch checkpoint file (neither of torch.save's "
                     "formats)")


def _check_crc(path: str, size: int) -> None:
    """Every member's zip CRC (about 1 GB/s: 10 ms for a 10 MB checkpoint; a flipped byte
    that the zip directory does not show)."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
        raise _error(f"{path}: the checkpoint file is corrupt ({size} bytes; a member cannot "
                     f"be read: {type(e).__name__})", e)
    if bad is not None:
        raise _error(f"{path}: the checkpoint file is corrupt: the CRC of its member {bad} "
                     "does not match (a changed byte; a disk or copy error)")


def intact(path: str) -> bool:
    """Whether ``path`` is a whole checkpoint file: :func:`check_readable`, and for a zip
    archive every member's CRC (reads the bytes, unpickles nothing)."""
    try:
        check_readable(path)  # a zip archive's CRCs included
        with open(path, "rb") as f:
            is_zip = f.read(4) == _ZIP_MAGIC
        if is_zip:
            return True
        load_raw(path)  # the legacy format has no checksums: read it
        return True
    except (CheckpointError, zipfile.BadZipFile, OSError, EOFError, RuntimeError):
        return False


_GLOBAL = re.compile(r"GLOBAL (\S+)")


def explain_load_error(path: str, error: BaseException) -> CheckpointError:
    """The :class:`CheckpointError` for ``torch.load``'s ``error`` on ``path``."""
    text = str(error)
    if isinstance(error, pickle.UnpicklingError) and "weights_only" in text.lower():
        found = _GLOBAL.search(text)
        if found:
            return _error(f"{path}: refused by safe loading: the file refers to "
                          f"{found.group(1).rstrip('.,')}, which no fairseq checkpoint holds "
                          "(only load checkpoints from a source you trust)", error)
        return _error(f"{path}: not a readable checkpoint: its pickled data is corrupt or not "
                      "a checkpoint's (refused by safe loading)", error)
    first = text.strip().splitlines()[0] if text.strip() else ""
    detail = f"{type(error).__name__}: {first}" if first else type(error).__name__
    if len(detail) > 160:
        detail = detail[:157] + "..."
    torn = isinstance(error, (EOFError, RuntimeError, struct.error))
    why = "truncated or corrupt" if torn else "not a fairseq checkpoint's contents"
    return _error(f"{path}: not a readable checkpoint ({why}; {detail})", error)


#: What ``torch.load`` raises for a file it cannot read (a bad file, not a bug).
LOAD_ERRORS = (pickle.UnpicklingError, EOFError, RuntimeError, KeyError, ValueError,
               ImportError, AttributeError, IndexError, TypeError, struct.error)


def read(path: str, reader):
    """``reader(path)`` for a file that :func:`check_readable` accepts, with its loading
    errors as :class:`CheckpointError` naming the file, and a model that holds a NaN or an
    infinity refused (:class:`NonFiniteError` naming the file and the tensor)."""
    if "://" not in str(path):  # a local file (fairseq's PathManager also reads URLs)
        check_readable(path)
    try:
        state = reader(path)
    except CheckpointError:
        raise
    except LOAD_ERRORS as e:
        raise explain_load_error(path, e)
    found = non_finite(state)
    if found is not None:
        name, bad = found
        raise NonFiniteError(f"{path}: cannot be used: its tensor {name} holds {bad} non-finite "
                             "value(s) (NaN or infinity; a corrupt file or a diverged model)")
    return state


def load_raw(path: str) -> dict:
    """The checkpoint dict as stored (``torch.load``, weights only), e.g. to average it."""
    import torch

    state = read(path, lambda p: torch.load(p, map_location="cpu", weights_only=True))
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise _error(f"{path}: not a fairseq checkpoint (no 'model' state dict)")
    return state


def task_kind(task_name: Optional[str]) -> Optional[str]:
    """``translation`` for fairseq's translation tasks (``translation``,
    ``translation_multi_simple_epoch`` ...), ``language_model`` for ``language_modeling``
    (and its variants), else the task's name (None: unknown)."""
    if task_name is None:
        return None
    if "translation" in task_name:
        return "translation"
    if "language_model" in task_name:
        return "language_model"
    return task_name


def checkpoint_kind(state: dict) -> Optional[str]:
    """``translation``, ``language_model``, another task's name, or None if unknown."""
    task = None
    args = state.get("args")
    if args is not None:
        task = getattr(args, "task", None)
    cfg = state.get("cfg")
    if task is None and cfg is not None:
        section = cfg.get("task") if hasattr(cfg, "get") else None
        task = section.get("_name") if section is not None and hasattr(section, "get") else None
    return task_kind(task)


class Kind(str, enum.Enum):
    """The kind of model a checkpoint holds, decided once from its task (:func:`of`) and carried
    from there (``Loaded.kind`` of :mod:`fairseq_shared.tools.checkpoints`): what the export
    and the tools read instead of testing the model, its task or its configuration again."""

    TRANSLATION = "translation"
    LANGUAGE_MODEL = "language_model"

    @property
    def described(self) -> str:
        """``translation`` or ``language model``, as the tools' messages name it."""
        return KINDS[self.value]

    @classmethod
    def of(cls, state: dict) -> Optional["Kind"]:
        """The kind of the checkpoint ``state`` (None: another task's, or unknown)."""
        kind = checkpoint_kind(state)
        return cls(kind) if kind in KINDS else None


def check_kind(state: dict, path: str, expect: Optional[str], tool: str = "this tool") -> None:
    if expect is None:
        return
    if expect not in KINDS:
        raise ValueError(f"expect={expect!r}; allowed: {', '.join(KINDS)}")
    kind = checkpoint_kind(state)
    if kind in KINDS and kind != expect:  # another task: left to the tool's own checks
        raise _error(f"{path} is a {KINDS[kind]} checkpoint; {tool} needs a {KINDS[expect]} "
                     "checkpoint")


def load(path: str, expect: Optional[str] = None, data: Optional[str] = None,
         tool: str = "this tool", overrides: Optional[dict] = None) -> dict:
    """fairseq's ``load_checkpoint_to_cpu(path, overrides)`` (``cfg`` an omegaconf config;
    ``data`` overrides its data directory), checked to be an ``expect`` checkpoint."""
    from fairseq import checkpoint_utils  # the package's import already ran compat

    overrides = {**(overrides or {}), **({"data": data} if data else {})} or None
    # compat (fix 6) reads every file fairseq loads through :func:`read`: its checks run once
    state = checkpoint_utils.load_checkpoint_to_cpu(path, overrides)
    check_kind(state, path, expect, tool)
    return state


# ---------------------------------------------------------------------------- the task
def setup_task(task_cfg, path: str, data: Optional[str] = None):
    """``fairseq.tasks.setup_task(task_cfg)``; a missing dictionary or data directory says
    to pass ``--data``."""
    from fairseq import tasks

    try:
        return tasks.setup_task(task_cfg)
    except FileNotFoundError as e:
        missing = e.filename or str(e)
        where = data or getattr(task_cfg, "data", None)
        if data:
            raise _error(f"--data {data}: {missing} not found (the directory should hold the "
                         f"dict.*.txt files {path} was trained with)", e)
        first = str(where).split(os.pathsep)[0]
        lacks = ("does not exist" if not os.path.isdir(first) else
                 f"has no {os.path.relpath(str(missing), first)}")
        raise _error(f"{path}: its data directory {where} {lacks} (moved since training?); "
                     "pass --data DIR, the directory with the dict.*.txt files it was trained "
                     "with", e)


# ---------------------------------------------------------------------------- writing
def atomic_write(path: str, write) -> str:
    """``write(f)`` into a temporary file beside ``path`` (binary), flushed to disk, then
    renamed over ``path``: a crash or a full disk leaves the old file or the new one, never a
    torn one. Never writes through a symlink at ``path`` (the link itself is replaced). An
    ``OSError`` (full disk, read-only directory) is a :class:`CheckpointError` naming
    ``path`` and the cause."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                   dir=directory)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would create it (mkstemp: 0600)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise _error(f"{path}: cannot write it: {write_failure(e)}; nothing was replaced", e)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_text(path: str, text: str) -> str:
    """``text`` (UTF-8) into ``path`` through :func:`atomic_write`."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def copy_file(src: str, dst: str) -> str:
    """``src``'s bytes into ``dst`` through :func:`atomic_write`."""
    import shutil

    with open(src, "rb") as source:
        return atomic_write(dst, lambda f: shutil.copyfileobj(source, f))


def file_sha256(path: str) -> str:
    """The sha256 of a file's bytes, read in blocks (the export's and distillation's records)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_failure(error: OSError) -> str:
    """``No space left on device (ENOSPC)``: an ``OSError``'s cause, in words and by name."""
    import errno

    name = errno.errorcode.get(error.errno or 0)
    cause = error.strerror or str(error) or type(error).__name__
    return f"{cause} ({name})" if name else cause


def non_finite(state) -> Optional[Tuple[str, int]]:
    """The first floating-point tensor of a checkpoint's ``state["model"]`` that holds a NaN or
    an infinity, and how many it holds; None when all are finite (or ``state`` has no model)."""
    import torch

    model = state.get("model") if isinstance(state, dict) else None
    for name, value in (model if isinstance(model, dict) else {}).items():
        if torch.is_tensor(value) and value.is_floating_point() and value.numel():
            bad = int((~torch.isfinite(value)).sum())
            if bad:
                return name, bad
    return None


def refuse_non_finite(state: dict, path: str) -> None:
    """Raise :class:`NonFiniteError` when a floating-point tensor of ``state["model"]`` holds
    a NaN or an infinity (a corrupt input, or a diverged model), naming it."""
    found = non_finite(state)
    if found is not None:
        name, bad = found
        raise NonFiniteError(f"{path}: not written: {name} holds {bad} non-finite value(s) "
                             "(NaN or infinity; a corrupt input or a diverged model)")


def save(state: dict, path: str) -> str:
    """``torch.save(state, path)`` through :func:`atomic_write`, after
    :func:`refuse_non_finite`."""
    import torch

    refuse_non_finite(state, path)
    return atomic_write(path, lambda f: torch.save(state, f))


# ---------------------------------------------------------------------------- overwriting
def same_file(a: str, b: str) -> bool:
    """The same path, or the same file (device and inode: hard links, symlinks)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def files_in(directory: str, names: Iterable[str]) -> list:
    """The paths a tool writes into its output ``directory``, for :func:`refuse_overwrite`."""
    return [os.path.join(directory, n) for n in names]


def refuse_overwrite(inputs: Sequence[str], outputs: Sequence[str],
                     flags: Optional[dict] = None) -> None:
    """Raise :class:`CheckpointError` when an output path is (or, through a link, would
    replace) one of the inputs, naming both. ``outputs`` are file paths (an output
    directory: the files written into it, :func:`files_in`); ``flags`` maps an output path
    to the flag that gave it, for the message."""
    flags = flags or {}
    for out in outputs:
        for inp in inputs:
            if inp and out and same_file(out, inp):
                name = f"{flags[out]} {out}" if out in flags else str(out)
                raise _error(f"{name} would overwrite the input {inp}; write the output to "
                             "another path")


# ---------------------------------------------------------------------------- resuming
def newest_intact(directory: str, exclude: Iterable[str] = (), suffix: str = "") -> Optional[str]:
    """The most recently written ``checkpoint*{suffix}.pt`` of ``directory`` that is
    :func:`intact` (``exclude``: paths not to consider), or None."""
    skip = {os.path.realpath(p) for p in exclude}
    candidates = [p for p in glob.glob(os.path.join(glob.escape(directory), f"checkpoint*{suffix}.pt"))
                  if os.path.realpath(p) not in skip and os.path.isfile(p)]
    candidates.sort(key=lambda p: (os.path.getmtime(p), p), reverse=True)
    return next((p for p in candidates if intact(p)), None)
