"""Issue 55's configurations at cycle_rev 6+6/3's size: the parameter counts the catalogue's
comments and results/bible_budget/PLAN_55.md state are the ones the budget's training command
builds, with the budget corpus's dictionaries (results/bible_budget/corpus)."""

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "results" / "bible_budget" / "corpus"
#: the counts PLAN_55.md states (and the catalogue's comments)
COUNTS = {"vanilla": 2_414_080, "cycle_rev_2L": 2_414_080, "vanilla_2L_narrow": 2_409_984,
          "cycle_rev_2L_depthcond": 2_426_368, "cycle_rev_2L_lora8": 2_684_416,
          "vanilla_2L": 3_802_624}


@pytest.fixture(scope="module")
def dictionaries(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dicts")
    shutil.copy(CORPUS / "source.dict.txt", folder / "dict.es.txt")
    shutil.copy(CORPUS / "target.dict.txt", folder / "dict.en.txt")
    return folder


def count(name: str, folder: Path) -> int:
    from fairseq_shared.models.build import count_params
    from harness.configs import CONFIGS, load_budget
    from harness.runs import Run

    config = next(c for c in CONFIGS if c["name"] == name)
    run = Run(config, load_budget("budget_curve"), str(folder), str(folder / "out"))
    return count_params([str(folder), "--task", "translation", "--source-lang", "es",
                         "--target-lang", "en", *run.model_flags(), "--share-all-embeddings"])


def test_the_fixed_size_rows_have_the_counts_the_plan_states(dictionaries):
    assert {name: count(name, dictionaries) for name in COUNTS} == COUNTS
    narrow, shared = COUNTS["vanilla_2L_narrow"], COUNTS["cycle_rev_2L"]
    assert abs(narrow - shared) / shared < 0.01  # the "within 1%"
    assert abs(COUNTS["cycle_rev_2L_depthcond"] - shared) / shared < 0.01


def test_the_plan_quotes_these_counts():
    plan = (ROOT / "results" / "bible_budget" / "PLAN_55.md").read_text(encoding="utf-8")
    quoted = {int(n.replace(",", "")) for n in re.findall(r"\b\d,\d{3},\d{3}\b", plan)}
    assert set(COUNTS.values()) <= quoted
