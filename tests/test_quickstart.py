"""The README's quick starts, run as written on tiny corpora in the Bible corpus's layout.

Each command of a quick-start block runs through bash with four substitutions only: the
corpus path (``work/bible``, ``work/bible_lm``) becomes a tiny corpus, ``--user-dir
fairseq_shared`` the package's absolute path, ``--max-update N`` a few updates, and
fairseq-generate and fairseq-shared-export decode at most 10 tokens (``--max-len-b 10``: a
model of a few updates rarely ends a sentence, and its 200 tokens a sentence took a minute).
The corpus builds are left out (their own tests build them). Whatever else the README says is
what runs, so a flag that stops working breaks this test."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_shared.fairseq_commands import USER_DIR
from helpers_data import shared_toy_corpus

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CORPUS_BUILDS = ("python -m fairseq_shared.cli.bible ", "python -m fairseq_shared.cli.bible_lm ")


def quickstart_commands(title: str):
    """The commands of the first ```bash block after the heading ``## TITLE``, continuation
    lines joined, comments dropped."""
    text = README.read_text(encoding="utf-8")
    section = text.split(f"## {title}\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#[^'\"]*$", "", line).strip()  # a trailing comment
        if line:
            commands.append(line)
    return commands


def run_quickstart(title, corpus_path, corpus, cwd):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               OMP_NUM_THREADS="1")
    ran = []
    for command in quickstart_commands(title):
        if command.startswith(CORPUS_BUILDS):
            continue
        command = command.replace(corpus_path, corpus)
        command = command.replace("--user-dir fairseq_shared", f"--user-dir {shlex.quote(USER_DIR)}")
        command = re.sub(r"--max-update \d+", "--max-update 3", command)
        command = re.sub(r"^(fairseq-generate|fairseq-shared-export) ", r"\1 --max-len-b 10 ",
                         command)
        command = re.sub(r"^python ", shlex.quote(sys.executable) + " ", command)
        result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env,
                                capture_output=True, text=True)
        assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        ran.append((command, result))
    return ran


def test_the_blocks_are_found_and_hold_what_the_readme_promises():
    mt = quickstart_commands("Quick start: translation")
    tools = [shlex.split(c)[0] for c in mt]
    assert tools == ["python", "fairseq-train", "fairseq-generate", "python",
                     "fairseq-shared-export", "fairseq-generate"]
    assert "--user-dir" not in mt[-1], "the last generate is stock fairseq on the export"
    lm = quickstart_commands("Quick start: language model")
    assert [shlex.split(c)[0] for c in lm] == ["python", "fairseq-train", "fairseq-eval-lm"]


def test_translation_quickstart_runs_as_written(tmp_path, tmp_path_factory):
    corpus = shared_toy_corpus(tmp_path_factory)  # only read: the outputs go to tmp_path
    ran = run_quickstart("Quick start: translation", "work/bible", corpus, tmp_path)
    assert len(ran) == 5
    hyps = [l for l in (tmp_path / "gen.txt").read_text().splitlines() if l.startswith("H-")]
    stock = [l for l in (tmp_path / "gen.stock.txt").read_text().splitlines() if l.startswith("H-")]
    assert len(hyps) == 23 and sorted(stock) == sorted(hyps), \
        "stock fairseq on the export translates every test sentence as the plug-in does"
    scoring = ran[2][1].stdout
    assert "BLEU" in scoring and "chrF2" in scoring
    for path in ("export/checkpoint.pt", "export/ct2/model.bin", "export/hf/config.json",
                 "export/export.json"):
        assert (tmp_path / path).exists(), path


def test_language_model_quickstart_runs_as_written(tmp_path):
    from fairseq_shared.data import bible_lm
    from helpers_data import make_fake_bible

    bible = make_fake_bible(tmp_path / "bible")
    bible_lm.build(bible, tmp_path / "bible_lm")
    ran = run_quickstart("Quick start: language model", "work/bible_lm", str(tmp_path / "bible_lm"),
                         tmp_path)
    assert len(ran) == 2
    assert re.search(r"Perplexity: [0-9.]+", ran[-1][1].stderr + ran[-1][1].stdout)
