"""The second install route of the README: the wheel built from the checkout (``pip install
.[export]``) into a fresh virtual environment that already holds torch and fairseq holds the
plug-in alone (no harness), gives every console script, and fairseq-train takes the installed
plug-in with ``--user-dir`` (issues 23 and 54). Slow: ``pytest -m slow``."""

import subprocess
import sys
from pathlib import Path

import pytest

from helpers_data import ENV, data_bin

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["audit", "average", "convert-policy", "convert-sharing", "count-params", "distill",
           "export", "learn-policy", "learn-sharing", "time-generate"]


def test_pyproject_declares_every_console_script_with_a_main():
    import importlib
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    scripts = project["scripts"]
    assert sorted(s[len("fairseq-shared-"):] for s in scripts) == SCRIPTS
    for target in scripts.values():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func)), target
    extras = project["optional-dependencies"]
    assert {"export", "bible", "experiments", "test"} <= set(extras)
    assert any(d.startswith("transformers") for d in extras["export"])
    assert all(">=" in d for d in project["dependencies"])  # lower bounds, not pins


@pytest.mark.slow
def test_the_wheel_installs_into_an_environment_holding_torch_and_fairseq(tmp_path, tmp_path_factory):
    base_venv = Path(sys.executable).parent.parent
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_install.sh"), str(tmp_path),
         str(data_bin(tmp_path_factory))],
        env=dict(ENV, BASE_VENV=str(base_venv)), capture_output=True, text=True, timeout=1200)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "[check_install] ok" in output
    assert "the wheel holds: fairseq_shared fairseq_shared-0.1.0.dist-info\n" in output
    assert "console scripts: " + " ".join(f"fairseq-shared-{s}" for s in SCRIPTS) in output
    assert "2 updates of a shared model" in output
