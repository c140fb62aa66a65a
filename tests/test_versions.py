"""An unsupported torch is refused at import with the version and the range (issue 23, 4)."""

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fairseq_shared.versions import check_torch

ROOT = Path(__file__).resolve().parent.parent


def test_supported_versions_pass_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for v in ("2.6.0", "2.13.0+cpu", "2.15.0", "2.10.1+cu128"):
            check_torch(v)


def test_older_torch_is_refused_naming_version_and_range():
    with pytest.raises(ImportError) as err:
        check_torch("2.5.1")
    assert str(err.value) == ("fairseq_shared needs torch >= 2.6 (supported: 2.6 to 2.15, see "
                              "results/compat/README.md); this environment has torch 2.5.1")


def test_newer_torch_warns():
    with pytest.warns(UserWarning, match="torch 2.16.0 is newer than the newest measured"):
        check_torch("2.16.0")


def test_import_gives_one_clear_line_before_fairseq_is_imported():
    code = ("import sys, torch; torch.__version__ = '2.1.0'\n"
            "try:\n    import fairseq_shared\n"
            "except ImportError as e:\n    print('fairseq' in sys.modules, e)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.stdout.strip() == ("False fairseq_shared needs torch >= 2.6 (supported: 2.6 "
                                     "to 2.15, see results/compat/README.md); this environment has "
                                     "torch 2.1.0"), result.stderr[-2000:]
