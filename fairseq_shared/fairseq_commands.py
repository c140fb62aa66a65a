"""The one place fairseq command lines are built: fairseq's tools and this package's user dir.

Every caller that starts ``fairseq-train``, ``fairseq-generate``, ``fairseq-preprocess`` or
``fairseq-interactive`` (the experiments, the recipes, LEARNTOSHARE, the toy corpus, the
tests, the scripts through ``python -m fairseq_shared.cli.fairseq``) finds the executable
with :func:`fairseq_tool` and the plug-in with :data:`USER_DIR`.
"""

import os
import sys
from typing import List

# --user-dir: the fairseq_shared package directory
USER_DIR = os.path.dirname(os.path.abspath(__file__))
TOOLS = ("train", "generate", "preprocess", "interactive", "validate", "score", "eval_lm")


def fairseq_tool(tool: str) -> List[str]:
    """The command that runs fairseq's ``tool`` (``train``, ``generate`` ...): the console
    script installed beside this Python (``fairseq-train``), else ``python -m
    fairseq_cli.train``; ``eval_lm`` is ``fairseq-eval-lm``)."""
    if tool not in TOOLS:
        raise ValueError(f"fairseq tool: unknown '{tool}'; allowed: {', '.join(TOOLS)}")
    exe = os.path.join(os.path.dirname(sys.executable), f"fairseq-{tool.replace('_', '-')}")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", f"fairseq_cli.{tool}"]


def fairseq_command(tool: str, data: str, *args: str, user_dir: bool = True) -> List[str]:
    """``fairseq-TOOL DATA --user-dir USER_DIR ARGS...`` as a list of strings
    (``user_dir=False``: stock fairseq, without the plug-in)."""
    plugin = ["--user-dir", USER_DIR] if user_dir else []
    return fairseq_tool(tool) + [str(data), *plugin, *(str(a) for a in args)]


def terminate_on_sigterm() -> None:
    """SIGTERM -> SystemExit, so that a running fairseq child process is terminated too."""
    import signal

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass
