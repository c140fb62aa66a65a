"""The contamination audit: candidate retrieval, near-duplicate shares, the lookup baseline,
and the command's report and exit status."""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fairseq_shared.cli import audit as command
from fairseq_shared.data import audit, pipeline

ROOT = Path(__file__).resolve().parents[1]

TRAIN = [
    ("Y dijo Dios: Sea la luz: y fué la luz.", "God said, “Let there be light,” and there was light."),
    ("Y vió Dios que la luz era buena.", "God saw the light, and saw that it was good."),
    ("Y llamó Dios á la luz Día, y á las tinieblas llamó Noche.", "God called the light “day”, and the darkness he called “night”."),
    ("Estos son los nombres de los hijos de Israel.", "These are the names of the sons of Israel."),
    ("Y el Verbo fué hecho carne.", "The Word became flesh."),
    ("Jesús lloró.", "Jesus wept."),
]
HELD = [
    # a near-copy of train line 2
    ("Y vió Dios que la luz era muy buena.", "God saw the light, and saw that it was very good."),
    # an exact copy of train line 6
    ("Jesús lloró.", "Jesus wept."),
    # nothing like it in train
    ("Pablo fué á Roma en un barco grande.", "Paul sailed to Rome on a large ship."),
]


def test_index_top_k_ranks_the_closest_first():
    index = audit.CharNgramIndex([s for s, _ in TRAIN])
    top = index.top_k(["Y vió Dios que la luz era muy buena.", "Jesús lloró"], k=3)
    assert top.shape == (2, 3)
    assert top[0, 0] == 1 and top[1, 0] == 5


def test_chunked_index_finds_the_same_neighbours():
    texts = [s for s, _ in TRAIN for _ in range(2)]  # each line twice: 12 texts
    whole = audit.CharNgramIndex(texts)
    # chunks of 5 texts; vocabulary and IDF fitted on every second text (each line once)
    chunked = audit.CharNgramIndex(texts, fit_max=6, chunk=5)
    queries = [s for s, _ in HELD]
    a, b = whole.top_k(queries, 5), chunked.top_k(queries, 5)
    # copies of a line tie: in corpus order, across chunk borders too, so the indices agree
    assert a.tolist() == b.tolist() and b.shape == (3, 5)
    assert all(texts[a[i, 0]] == texts[a[i, 1]] and a[i, 0] < a[i, 1] for i in range(2))


def test_best_per_row_is_a_full_sort_by_value_then_column():
    rng = np.random.default_rng(0)
    sims = rng.integers(0, 4, size=(50, 40)).astype(np.float32)  # many ties, at the k-th too
    for k in (1, 5, 40, 60):
        ids, vals = audit.best_per_row(sims, k)
        expected = np.array([sorted(range(40), key=lambda c: (-row[c], c))[:k] for row in sims])
        assert ids.tolist() == expected.tolist()
        assert vals.tolist() == np.take_along_axis(sims, expected, axis=1).tolist()


def test_lookup_breaks_a_tie_between_copies_of_a_source_by_the_later_verse():
    src = [s for s, _ in TRAIN] + [TRAIN[5][0]]  # line 5's source again, another target
    tgt = [t for _, t in TRAIN] + ["Jesus shed tears."]
    assert audit.lookup_translations(["Jesús lloró."], src, tgt, k=3) == ["Jesus shed tears."]
    assert audit.closest_train(["Jesús lloró."], ["Jesus cried."], src, tgt, k=3)[0][
        "best"] == len(src) - 1


def test_closest_train_scores_match_sacrebleu():
    import sacrebleu

    src, tgt = [s for s, _ in TRAIN], [t for _, t in TRAIN]
    closest = audit.closest_train([s for s, _ in HELD], [t for _, t in HELD], src, tgt, k=2)
    assert [c["best"] for c in closest[:2]] == [1, 5]
    expected = max(sacrebleu.sentence_chrf(tgt[1], [HELD[0][1]]).score,
                   sacrebleu.sentence_chrf(src[1], [HELD[0][0]]).score)
    assert abs(closest[0]["score"] - expected) < 1e-9 and closest[0]["score"] >= 70
    assert closest[1]["score"] == 100.0
    assert closest[2]["score"] < 50
    assert audit.contaminated_train_indices(closest, 70) == [1, 5]


def test_lookup_returns_the_target_of_the_closest_source():
    src, tgt = [s for s, _ in TRAIN], [t for _, t in TRAIN]
    out = audit.lookup_translations([s for s, _ in HELD], src, tgt, k=3)
    assert out[:2] == [tgt[1], tgt[5]]


def test_audit_command_report_and_exit_status(tmp_path):
    raw = tmp_path / "raw"
    for split, pairs in (("train", TRAIN), ("valid", HELD[2:]), ("test", HELD)):
        pipeline.write_lines(raw / f"{split}.es", (s for s, _ in pairs))
        pipeline.write_lines(raw / f"{split}.en", (t for _, t in pairs))
    cmd = [sys.executable, "-m", "fairseq_shared.cli.audit", str(raw), "-k", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "audit.json").read_text())
    test = report["splits"]["test"]
    assert test["exact_duplicates"] == {"source": 1, "target": 1, "pair": 1}
    assert abs(test["near_duplicate_share"]["70"] - 2 / 3) < 1e-9
    assert test["near_duplicate_ids"] == [0, 1]
    assert report["splits"]["valid"]["near_duplicate_share"]["50"] == 0.0
    import sacrebleu

    lookup = (tmp_path / "lookup.test.en").read_text().splitlines()
    assert test["lookup"]["bleu"] == round(
        sacrebleu.corpus_bleu(lookup, [[t for _, t in HELD]]).score, 2)
    assert "| test | 3 | 1 / 1 / 1 |" in (tmp_path / "audit.md").read_text()
    # above the allowed contamination: exit 1 and say which flag
    proc = _audit(raw, "--max-contamination", "0.01")
    assert proc.returncode == 1 and "--max-contamination" in proc.stderr
    # a directory without the training text: a clear usage error naming what is missing
    proc = _audit(tmp_path, k=None)
    assert proc.returncode == 2 and "missing train.es, train.en" in proc.stderr


def test_contamination_gate_fails_without_a_test_split(tmp_path, capsys):
    from fairseq_shared.cli import audit as command

    raw = tmp_path / "raw"
    raw.mkdir()
    for split, pairs in (("train", TRAIN), ("valid", HELD[2:])):
        pipeline.write_lines(raw / f"{split}.es", (s for s, _ in pairs))
        pipeline.write_lines(raw / f"{split}.en", (t for _, t in pairs))
    # the gate was asked for, and there is nothing to gate: fail, and say what was missing
    assert command.main([str(raw), "--max-contamination", "0.01"]) == 1
    err = capsys.readouterr().err
    assert "--max-contamination: no test split" in err and "test.es" in err
    # without the gate, a missing test split is a stated row, not a failure
    assert command.main([str(raw)]) == 0
    assert "absent" in (tmp_path / "audit.md").read_text()
    # a gate the splits leave out, or a share outside [0, 1], is a usage error naming the flag
    for bad in (["--splits", "valid", "--max-contamination", "0.01"], ["--max-contamination", "5"]):
        with pytest.raises(SystemExit) as stop:
            command.main([str(raw)] + bad)
        assert stop.value.code == 2 and "--max-contamination" in capsys.readouterr().err


def test_heldout_baseline_on_decoded_ids_and_score_without(tmp_path):
    raw = tmp_path / "raw"
    for split, pairs in (("train", TRAIN), ("valid", HELD[2:]), ("test", HELD)):
        pipeline.write_lines(raw / f"{split}.es", (s for s, _ in pairs))
        pipeline.write_lines(raw / f"{split}.en", (t for _, t in pairs))
    assert audit.heldout_baseline(tmp_path) is None  # no audit yet
    audit.write_report(audit.audit_corpus(raw, k=3), tmp_path)
    import sacrebleu

    lookup = (tmp_path / "lookup.test.en").read_text().splitlines()
    refs = [t for _, t in HELD]
    got = audit.heldout_baseline(tmp_path, ids=[1, 2])
    assert got["sentences"] == 2 and got["near_duplicate_positions"] == [0]  # test line 2
    assert got["bleu"] == round(sacrebleu.corpus_bleu(lookup[1:], [refs[1:]]).score, 2)
    clean = audit.score_without(["x", refs[1], refs[2]], refs, drop=[0])
    assert clean["bleu"] == 100.0 and clean["n"] == 2


def _write_corpus(raw, splits):
    for split, pairs in splits.items():
        pipeline.write_lines(raw / f"{split}.es", (s for s, _ in pairs))
        pipeline.write_lines(raw / f"{split}.en", (t for _, t in pairs))


def _audit(raw, *extra, k="3"):
    """The command's main in this process (a process costs an import of fairseq; the one test
    of printing to a real stdout runs it as one): its exit status and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    argv = [str(raw), *(["-k", k] if k else []), *extra]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = command.main(argv)
        except SystemExit as stop:
            code = stop.code
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def _audit_process(raw, *extra):
    return subprocess.run([sys.executable, "-m", "fairseq_shared.cli.audit", str(raw), "-k", "3",
                           *extra], capture_output=True, text=True, cwd=ROOT)


def _one_line_error(proc):
    """The command's error: one line, no traceback (fairseq's own import-time INFO lines aside),
    exit 1, as every command reports one (cli/errors.py)."""
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if not l.startswith("INFO:")]
    assert len(lines) == 1 and lines[0].startswith("audit: error: "), proc.stderr
    assert lines[0].endswith(" (--debug shows the traceback)")
    return lines[0]


def test_debug_shows_the_traceback_of_a_bad_corpus(tmp_path):
    """Issue 54/57: audit wraps its main in cli/errors.py as every command does (it exited 2
    with its own line and refused --debug)."""
    from fairseq_shared.data.audit import AuditError

    raw = tmp_path / "raw"
    _write_corpus(raw, {"train": TRAIN, "valid": HELD})
    (raw / "valid.en").write_text("")
    with pytest.raises(AuditError, match="valid.en: empty"):
        command.main([str(raw), "-k", "3", "--debug"])


def test_exact_duplicates_match_after_whitespace_normalisation():
    src, tgt = [s for s, _ in TRAIN], [t for _, t in TRAIN]
    # train line 6 again, with a trailing space, a doubled inner space and a tab
    held = [("Jesús  lloró. ", "Jesus\twept.  "), HELD[2]]
    r = audit.audit_split([s for s, _ in held], [t for _, t in held], src, tgt, k=3)
    assert r["exact_duplicates"] == {"source": 1, "target": 1, "pair": 1}
    assert audit.normalise_space("  a \t b  c ") == "a b c"


def test_a_split_with_one_side_missing_is_refused_naming_the_file(tmp_path):
    raw = tmp_path / "raw"
    _write_corpus(raw, {"train": TRAIN, "valid": HELD[2:], "test": HELD})
    (raw / "valid.es").unlink()
    err = _one_line_error(_audit(raw))
    assert "valid.es: missing" in err and not (tmp_path / "audit.json").exists()


def test_a_split_with_neither_side_is_a_stated_row(tmp_path):
    raw = tmp_path / "raw"
    _write_corpus(raw, {"train": TRAIN, "test": HELD})
    proc = _audit(raw)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "audit.json").read_text())
    assert list(report["splits"]) == ["test"]
    assert report["absent"] == {"valid": ["valid.es", "valid.en"]}
    assert "| valid | absent: no valid.es or valid.en |" in (tmp_path / "audit.md").read_text()


def test_unequal_empty_and_undecodable_files_are_refused_with_file_and_line(tmp_path):
    raw = tmp_path / "raw"
    _write_corpus(raw, {"train": TRAIN, "valid": HELD[2:], "test": HELD})
    pipeline.write_lines(raw / "test.en", [t for _, t in HELD[:2]])  # 3 sources, 2 targets
    err = _one_line_error(_audit(raw))
    assert "test.es has 3 lines" in err and "test.en 2" in err and "before line 3" in err

    _write_corpus(raw, {"test": HELD})
    (raw / "valid.en").write_bytes(b"")
    assert "valid.en: empty" in _one_line_error(_audit(raw))

    _write_corpus(raw, {"valid": HELD[2:]})
    lines = (raw / "train.es").read_bytes().split(b"\n")
    lines[3] = "Estos son los nombres de los hijos de Israel, señor.".encode("latin-1")
    (raw / "train.es").write_bytes(b"\n".join(lines))
    err = _one_line_error(_audit(raw))
    assert "train.es: line 4: byte 0xf1" in err and "not UTF-8" in err


def test_a_path_that_is_not_utf8_is_reported_escaped(tmp_path):
    """issue 38, item 4: audit.json raised UnicodeEncodeError for a directory named with a
    Latin-1 byte; the reports and the printed lines show the byte as \\xff."""
    import os

    root = tmp_path / os.fsdecode(b"corpus\xff")
    _write_corpus(root / "raw", {"train": TRAIN, "valid": HELD[2:], "test": HELD})
    proc = _audit_process(root / "raw")  # printed to a real stdout: the process itself
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "corpus\\xff" in proc.stdout
    report = json.loads((root / "audit.json").read_text(encoding="utf-8"))
    assert report["raw_dir"].endswith("corpus\\xff/raw")
    assert (root / "audit.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("snapshot", sorted(
    str(p.parent.relative_to(Path(__file__).resolve().parents[1]))
    for p in (Path(__file__).resolve().parents[1] / "results").glob("**/corpus/lookup.test.hyp")))
def test_each_committed_lookup_baseline_scores_what_its_audit_says(snapshot):
    import sacrebleu

    root = Path(__file__).resolve().parents[1] / snapshot
    hyps, refs = (root.joinpath(name).read_text().splitlines()
                  for name in ("lookup.test.hyp", "test.ref"))
    recorded = json.loads((root / "audit.json").read_text())["splits"]["test"]["lookup"]
    assert len(hyps) == len(refs)
    assert round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2) == recorded["bleu"]
    assert round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2) == recorded["chrf"]
