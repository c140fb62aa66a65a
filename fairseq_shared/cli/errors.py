"""How every command of ``fairseq_shared.cli`` reports a bad file or flag: one line on stderr,
``TOOL: error: MESSAGE``, and exit status 1 (a command whose 1 means something else, as
``export``'s failed verification, names its own: ``@command(status=2)``), without a traceback.

Such errors are the package's (each names the file or flag and what is allowed:
:class:`~fairseq_shared.checkpoint_io.CheckpointError` and the tools' own ``ValueError``
subclasses) and the operating system's (``OSError``: a missing or unwritable path). Other
exceptions are bugs and keep their traceback. ``--debug`` (anywhere before a ``--`` that
starts another program's flags) or ``FAIRSEQ_SHARED_DEBUG=1`` in the environment shows the
traceback of every error, with the underlying exception.
"""

import functools
import os
import sys
from typing import List, Optional, Sequence, Tuple

from fairseq_shared.checkpoint_io import DEBUG_ENV, debug_enabled
from fairseq_shared.errors import one_line

DEBUG_FLAG = "--debug"
#: What a user can fix from the message alone.
USER_ERRORS = (ValueError, OSError)


def split_debug(argv: Sequence[str]) -> Tuple[List[str], bool]:
    """``argv`` without ``--debug`` (only before a ``--``), and whether it was there."""
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    ours = [a for a in argv[:end] if a != DEBUG_FLAG]
    return ours + argv[end:], len(ours) < end


def tool_name(module: str) -> str:
    """``convert_sharing`` for ``fairseq_shared.cli.convert_sharing``, also as ``__main__``."""
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = spec.name if spec is not None else os.path.basename(sys.argv[0])
    return module.rsplit(".", 1)[-1]


def command(main=None, *, status: int = 1):
    """Wrap a command's ``main(argv=None)`` so that its errors are reported as above, exiting
    with ``status``."""
    if main is None:
        return functools.partial(command, status=status)

    @functools.wraps(main)
    def wrapper(argv: Optional[Sequence[str]] = None):
        argv, debug = split_debug(sys.argv[1:] if argv is None else argv)
        previous = os.environ.get(DEBUG_ENV)
        if debug:
            os.environ[DEBUG_ENV] = "1"
        try:
            return main(argv)
        except USER_ERRORS as error:
            if debug_enabled():
                error.fairseq_shared_debug = True  # the excepthook (compat, 8) runs after the
                raise  # environment is restored below: it keeps the traceback by this mark
            print(f"{tool_name(main.__module__)}: error: {one_line(error)} (--debug shows the traceback)",
                  file=sys.stderr)
            raise SystemExit(status)
        finally:
            if debug:
                if previous is None:
                    os.environ.pop(DEBUG_ENV, None)
                else:
                    os.environ[DEBUG_ENV] = previous

    return wrapper
