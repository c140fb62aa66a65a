"""A library module run as a program fails loudly, naming the command to run instead.

The commands live in ``fairseq_shared/cli/``; the library modules they call (``data/audit.py``,
``tools/averaging.py`` ...) have no ``__main__`` block, so ``python -m
fairseq_shared.data.audit RAW --max-contamination 0.01`` imported one, did nothing and exited 0:
a gate that passed without auditing (the form a command had before it moved to ``cli/``).
The package's ``__init__`` calls :func:`refuse_a_library_module_run_as_a_command` first: while
``python -m`` locates its module, ``sys.argv[0]`` is ``-m`` and ``sys.orig_argv`` names the
module, so one check covers every module of the package, old command paths or not. It prints
one line naming the command's real module path and exits with status 2 (a usage error).
"""

import os
import sys
from typing import List, Optional, Sequence

PACKAGE = "fairseq_shared"
COMMANDS = f"{PACKAGE}.cli"

#: Library modules (and the module paths commands had before ``cli/``) -> their command.
COMMAND_OF = {
    "data.audit": "audit",
    "data.bible": "bible",
    "data.bible_lm": "bible_lm",
    "data.recipes": "recipes",
    "data.recipe_runs": "recipes",
    "data.toydata": "toydata",
    "scoring": "scoring",
    "tools.averaging": "average_checkpoints",
    "tools.convert_sharing": "convert_sharing",
    "tools.learn_sharing": "learn_sharing",
    "tools.convert_policy": "convert_policy",
    "tools.learn_policy": "learn_policy",
    "tools.policy_rounds": "learn_to_share",
    "models.build": "count_params",
    "distill": "distill",
    "distill.run": "distill",
    "export": "export",
    "export.api": "export",
    "timing": "time_generate",
    "timing.session": "time_generate",
}


def module_run(orig_argv: Sequence[str]) -> Optional[str]:
    """The MODULE of a ``python [options] -m MODULE ...`` command line (also ``-mMODULE``),
    else None."""
    args = list(orig_argv[1:])
    while args:
        arg = args.pop(0)
        if arg == "-m":
            return args[0] if args else None
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:]
        if arg in ("-W", "-X", "--check-hash-based-pycs"):  # an option with a value
            args = args[1:]
        elif not arg.startswith("-") or arg.startswith("-c") or arg == "-":
            return None  # a script, -c COMMAND or stdin
    return None


def commands() -> List[str]:
    """The names of the package's commands: the modules of ``cli/`` that define a ``main``."""
    directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli")
    names = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".py") and not name.startswith("_"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                if "\ndef main(" in f.read():
                    names.append(name[:-3])
    return names


def refusal(module: str) -> Optional[str]:
    """The one line for ``python -m MODULE``, or None when ``MODULE`` is not a library module
    of the package (a command of ``cli/``, the package itself, another package)."""
    if not module.startswith(f"{PACKAGE}.") or module == COMMANDS or module.startswith(
            f"{COMMANDS}."):
        return None
    command = COMMAND_OF.get(module[len(PACKAGE) + 1:])
    if command is not None:
        return (f"{module} is a library module, not a command: run python -m "
                f"{COMMANDS}.{command} instead")
    return (f"{module} is a library module, not a command; the commands are python -m "
            f"{COMMANDS}.NAME, NAME one of: {', '.join(commands())}")


def refuse_a_library_module_run_as_a_command() -> None:
    """Exit with status 2 and :func:`refusal`'s line when this process is ``python -m`` of a
    library module of the package (see the module's docstring)."""
    if sys.argv[:1] != ["-m"]:  # python -m sets sys.argv[0] to "-m" only while locating
        return
    module = module_run(getattr(sys, "orig_argv", []))
    line = refusal(module) if module else None
    if line is not None:
        print(f"error: {line}", file=sys.stderr)
        raise SystemExit(2)
