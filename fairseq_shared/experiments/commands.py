"""Old name of :mod:`fairseq_shared.fairseq_commands` (moved into the library), kept so that
scripts written against it still run."""

from fairseq_shared.fairseq_commands import (  # noqa: F401
    TOOLS, USER_DIR, fairseq_command, fairseq_tool, terminate_on_sigterm)
