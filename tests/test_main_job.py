"""The main job end to end with the tiny budget on the synthetic corpus (no Bible download)."""

import os

import pytest

from fairseq_shared.experiments.drivers import main_job
from fairseq_shared.data.toydata import SIZES, build_toy_corpus


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    return build_toy_corpus(str(tmp_path_factory.getbasetemp() / "toy"))


def test_budget_from_env_and_flags(monkeypatch):
    monkeypatch.setenv("FS_DIM", "64")
    monkeypatch.setenv("FS_UPDATES", "123")
    monkeypatch.setenv("FS_DECODE_SENTENCES", "0")
    args = main_job.build_parser().parse_args(["--updates", "77", "--threads", "1"])
    b = main_job.make_budget(args)
    assert (b["dim"], b["ffn"], b["max_update"], b["threads"]) == (64, 256, 77, 1)  # flag wins
    assert b["subset"] is None  # 0 = decode every test sentence
    assert b["name"] == "demo" and b["L"] == 3


def test_main_job_tiny_end_to_end_and_rerun(toy, tmp_path_factory, capsys):
    work = str(tmp_path_factory.getbasetemp() / "work")  # runs shared with the other tests
    argv = ["--budget", "tiny", "--data", toy, "--work", work]
    assert main_job.main(argv) == 0
    out = capsys.readouterr().out
    for k in range(1, 6):
        assert f"=== stage {k}/5" in out or (k == 4 and "and 4: decode" in out)
    assert "using the prepared corpus" in out
    table = open(os.path.join(work, "main_job", "main_job.md")).read()
    rows = [l for l in table.splitlines() if l.startswith("| vanilla") or l.startswith("| cycle_rev")]
    assert len(rows) == 2
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    assert cells[0][1] == "2+2" and cells[1][1] == "4+4"
    assert cells[0][3] == cells[1][3]  # same parameter count
    assert all(c[5] != "-" and c[6] != "-" and c[7] != "-" for c in cells)  # BLEU, chrF, tok/s
    # decoder steps (with outputs at the length limit), CPU ms/step, the CPU ratio and range
    assert all(c[8].split(" (")[0].isdigit() and c[9] != "-" for c in cells)
    assert cells[0][10].startswith("x1.00 (1.00-1.00)")
    assert "`test` set, all" in table
    lookup = [l for l in table.splitlines() if l.startswith("| lookup baseline")]
    assert len(lookup) == 1 and lookup[0].count("|") == 13  # 12 columns, BLEU/chrF filled
    assert "Namespace(" not in out

    # re-running skips finished stages
    assert main_job.main(argv) == 0
    out2 = capsys.readouterr().out
    assert "vanilla: already trained" in out2 and "cycle_rev_2L: already trained" in out2
    assert "[decode] up to date" in out2
    assert SIZES["test"] == 23


def test_main_job_dry_run_builds_nothing(toy, tmp_path, capsys):
    assert main_job.main(["--budget", "tiny", "--data", toy, "--work", str(tmp_path),
                          "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "| vanilla |" in out and "| cycle_rev_2L |" in out and "nothing trained" in out
    assert not os.path.exists(tmp_path / "main_job" / "runs")
