"""The README's numbers kept equal to what produces them: its results table is rendered from the
committed records (``harness/readme_table.py``), and the architectures table's parameter counts
are those ``fairseq-shared-count-params`` prints."""

import re
from pathlib import Path

import pytest

from harness import readme_table
from harness.statistics import Difference

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def run(name, seed, bleu, loss, params=1000, n=3, dec=3):
    return {"name": name, "seed": seed, "label": name, "N": n, "decoder_N": dec,
            "params": params, "test": {"bleu": bleu}, "average_valid_loss": loss}


def test_the_table_states_a_verdict_per_difference_and_labels_the_distilled_loss():
    finals = {"vanilla": {1: run("vanilla", 1, 30.0, 5.4), 2: run("vanilla", 2, 31.0, 5.5)},
              "deep": {1: run("deep", 1, 31.5, 5.3, n=6)},
              "small": {1: run("small", 1, 27.0, 5.8, dec=1), 2: run("small", 2, 27.4, 5.7, dec=1)},
              "student": {1: run("student", 1, 30.2, 7.06), 2: run("student", 2, 30.4, 7.08)}}
    versus = {"deep": {"bleu": Difference(1.0, -0.2, 2.2, (2, 1)),
                       "valid_loss": Difference(-0.15, -0.25, -0.05, (2, 1))},
              "small": {"bleu": Difference(-3.3, -4.0, -2.6, (2, 2)),
                        "valid_loss": Difference(0.35, 0.2, 0.5, (2, 2))},
              "student": {"bleu": Difference(-0.2, -1.0, 0.6, (2, 2))}}
    engines = ["fairseq", "torchscript", "ct2_float32", "ct2_int8"]
    cells = {"vanilla": {"mb": "9.71 / 3.05", "ratios": {"1": [1.0, 1.6, 4.0, 7.9],
                                                         "32": [1.0, 1.2, 2.8, 2.9]}},
             "deep": {"mb": "11.57 / -", "ratios": {"1": [0.8, 1.4, None, None],
                                                    "32": [0.85, 1.1, None, None]}}}
    lines = readme_table.table(finals, versus, cells, ["student"], 6.27, ["vanilla", "deep"],
                               {"vanilla": "vanilla"}, engines, later=["small"])
    rows = {l.split(" | ")[0][2:]: l for l in lines if l.startswith("| ")}
    assert all(len(l.strip("|").split(" | ")) <= 7 for l in lines if l.startswith("|"))
    assert [k for k in rows][1:] == ["lookup baseline (closest training verse)", "`vanilla`: vanilla",
                                     "`deep`: deep", "`small`: small", "`student`: student"]
    assert "6.27" in rows["lookup baseline (closest training verse)"]
    assert "30.50 ± 0.71 (2 seeds)" in rows["`vanilla`: vanilla"]
    assert "7.90 / 2.90 (ct2_int8, 3.05 MB)" in rows["`vanilla`: vanilla"]
    deep = rows["`deep`: deep"]
    assert "31.50 (1 seed)" in deep and "not resolved: +1.00 [-0.20, +2.20]" in deep
    assert "better: -0.150 [-0.250, -0.050]" in deep, "lower valid loss is better"
    assert "1.40 / 1.10 (torchscript, 11.57 MB)" in deep, "the fastest engine at batch 1"
    small = rows["`small`: small"]
    assert "worse: -3.30 [-4.00, -2.60]" in small and "worse: +0.350 [+0.200, +0.500]" in small
    assert "not timed" in small
    student = rows["`student`: student"]
    assert "not compared: trained on the teacher's outputs (7.070 on the real references)" in student
    assert "`small` timed in later runs" in lines[-1]


def test_the_markers_hold_the_table_and_nothing_else_moves():
    page = f"intro\n{readme_table.BEGIN}\nold\n{readme_table.END}\nafter\n"
    out = readme_table.written(page, ["| a |", "|---|"])
    assert out == f"intro\n{readme_table.BEGIN}\n| a |\n|---|\n{readme_table.END}\nafter\n"
    assert readme_table.block(out) == "| a |\n|---|"
    with pytest.raises(SystemExit):
        readme_table.block("no markers")


def test_the_readmes_table_is_the_one_rendered_from_the_committed_records(capsys):
    """``python -m harness.readme_table --check``: the README's table equals a fresh render from
    the records (BLEU and valid loss differences with their bootstrap, the frontier's ratios)."""
    assert readme_table.main(["--results", str(ROOT / "results" / "bible_budget"),
                              "--readme", str(README), "--check"]) == 0, \
        "README.md: run python -m harness.readme_table"


def architecture_rows(page: Path):
    """``[(architecture, "60.92M")]`` of the README's (or docs/architectures.md's) parameter
    table: the first backticked name of each row whose last cell is a count."""
    rows = []
    for line in page.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        count = re.match(r"(\d+\.\d+M)\b", cells[-1]) if line.startswith("| `") else None
        if count:
            rows.append((re.search(r"`([\w]+)`", cells[0]).group(1), count.group(1)))
    return rows


def test_the_architectures_parameter_counts_are_count_params():
    from fairseq_shared.cli.count_params import build
    from fairseq_shared.sharing.tying import unique_parameter_count

    rows = architecture_rows(README) + architecture_rows(ROOT / "docs" / "architectures.md")
    assert "transformer_san" in dict(rows), "every architecture of the README has its count"
    counts = {}
    for arch, written in rows:
        if arch not in counts:
            counts[arch] = f"{unique_parameter_count(build(arch, 32768)) / 1e6:.2f}M"
        assert written == counts[arch], f"{arch}: {written} written, count_params {counts[arch]}"
