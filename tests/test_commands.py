"""The one fairseq command builder: executables, --user-dir, the shell scripts' entry point."""

import os
import subprocess
import sys

import pytest

import fairseq_shared
from fairseq_shared.fairseq_commands import USER_DIR, fairseq_command, fairseq_tool


def test_user_dir_is_the_package_and_tools_are_this_pythons():
    assert USER_DIR == os.path.dirname(os.path.abspath(fairseq_shared.__file__))
    exe = fairseq_tool("train")
    assert exe == [os.path.join(os.path.dirname(sys.executable), "fairseq-train")]
    assert os.access(exe[0], os.X_OK)


def test_command_is_tool_data_user_dir_then_args():
    cmd = fairseq_command("generate", "bin", "--beam", 4)
    assert cmd == [*fairseq_tool("generate"), "bin", "--user-dir", USER_DIR, "--beam", "4"]
    assert "--user-dir" not in fairseq_command("generate", "bin", user_dir=False)


def test_eval_lm_is_the_hyphenated_console_script():
    exe = fairseq_tool("eval_lm")
    assert exe == [os.path.join(os.path.dirname(sys.executable), "fairseq-eval-lm")]
    assert os.access(exe[0], os.X_OK)


def test_unknown_tool_names_the_allowed_ones():
    with pytest.raises(ValueError, match="unknown 'trian'; allowed: train, generate"):
        fairseq_tool("trian")


def test_cli_runs_fairseq_with_the_plug_in(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_shared.cli.fairseq", "train", str(tmp_path),
         "--arch", "transformer_cycle_rev", "--help"],
        capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # without the plug-in, fairseq refuses the architecture (invalid choice)
    stock = subprocess.run(
        [*fairseq_tool("train"), str(tmp_path), "--arch", "transformer_cycle_rev", "--help"],
        capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert stock.returncode != 0 and "transformer_cycle_rev" in stock.stderr
    # an unknown tool: the usage line, from main itself (a process of its own paid seconds of
    # imports for a check that runs before anything is started)
    from fairseq_shared.cli.fairseq import main

    with pytest.raises(SystemExit) as bad:
        main(["bogus", "x"])
    assert bad.value.code not in (0, None) and "TOOL one of: train" in str(bad.value.code)


# ---- a library module run as a program (issue 57, silent 10) ----------------------------------


def _run_module(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("module, command", [
    ("fairseq_shared.data.audit", "audit"),  # before cli/: exited 0 without auditing
    ("fairseq_shared.data.bible", "bible"),
    ("fairseq_shared.tools.averaging", "average_checkpoints"),
])
def test_an_old_command_path_fails_naming_the_real_one(module, command, tmp_path):
    proc = _run_module(module, str(tmp_path), "--max-contamination", "0.01")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"error: {module} is a library module, not a command: run python -m "
                           f"fairseq_shared.cli.{command} instead\n")


def test_any_other_library_module_lists_the_commands():
    proc = _run_module("fairseq_shared.sharing.stacks")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "fairseq_shared.sharing.stacks is a library module, not a command; the commands " \
           "are python -m fairseq_shared.cli.NAME, NAME one of: audit, average_checkpoints, " in proc.stderr


def test_every_named_command_and_library_module_exists():
    import importlib.util

    from fairseq_shared import library_modules

    for library, command in library_modules.COMMAND_OF.items():
        assert importlib.util.find_spec(f"fairseq_shared.{library}") is not None, library
        assert command in library_modules.commands(), command
    assert library_modules.refusal("fairseq_shared.cli.audit") is None
    assert library_modules.refusal("fairseq_cli.train") is None
    assert library_modules.module_run(["python", "-X", "dev", "-mfoo.bar", "x"]) == "foo.bar"
    assert library_modules.module_run(["python", "-c", "pass", "-m", "x"]) is None
    assert library_modules.module_run(["python", "-B", "-m", "foo.bar", "x"]) == "foo.bar"
    assert library_modules.module_run(["python", "-mfoo.bar"]) == "foo.bar"
    assert library_modules.module_run(["python", "script.py", "-m", "x"]) is None
