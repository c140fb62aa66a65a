"""The lock a command holds on its output for its whole run (the export's ``--out``, the
distillation's): a kernel lock (``flock``) on a file, released when its holder ends or is
killed (kill -9 included), so that a second run into the same output is refused at once."""

import contextlib
import fcntl
import os
from typing import Iterator, Type


@contextlib.contextmanager
def held(path: str, where: str, busy: str, error: Type[Exception]) -> Iterator[None]:
    """Hold the lock file ``path`` (created, never through a link), or raise ``error``:
    ``busy`` when another process holds it, ``WHERE: cannot create its lock PATH: cause``
    when it cannot be created."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise error(f"{where}: cannot create its lock {path}: {e.strerror or e}")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise error(busy)
        yield
    finally:
        os.close(fd)
