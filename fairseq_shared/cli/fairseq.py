"""Run a fairseq tool with this package as its user dir, found as the package finds it.

    python -m fairseq_shared.cli.fairseq train DATA_BIN --arch transformer_cycle_rev ...
    python -m fairseq_shared.cli.fairseq generate DATA_BIN --path CKPT ...

is ``fairseq-train DATA_BIN --user-dir <fairseq_shared> ...`` (the executable and the user
dir from :mod:`fairseq_shared.fairseq_commands`), for shell scripts.
"""

import os
import sys

from fairseq_shared.fairseq_commands import TOOLS, fairseq_command


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] not in TOOLS:
        raise SystemExit(f"usage: python -m fairseq_shared.cli.fairseq TOOL DATA [ARGS...]; "
                         f"TOOL one of: {', '.join(TOOLS)}")
    cmd = fairseq_command(argv[0], argv[1], *argv[2:])
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
