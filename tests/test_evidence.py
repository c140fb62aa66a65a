"""The evidence runs, a budget without milestones of the translation suite
(:mod:`harness.budget_curve`): a worker queue with one committed file per run,
claims, and the equal-updates tables rebuilt from those files (tiny budget on the toy corpus)."""

import json
import os
import shutil
import subprocess

import pytest

from harness import budget_curve, budget_report, queue, training
from harness.corpus import CORPUS_FILES, snapshot_corpus
from harness.statistics import load_runs, read_lines
from helpers_data import shared_main_job
from helpers_queue import toy  # noqa: F401  (a fixture)


@pytest.fixture(scope="module")
def finished(toy, tmp_path_factory):
    root = tmp_path_factory.mktemp("evidence")
    work, results = str(root / "work"), str(root / "results")
    snapshot_corpus(toy, results)
    # the main job's runs are these two items' runs (same budget, seed and command), trained
    # once per pytest run: the queue finds them trained and writes their records
    trained, _ = shared_main_job(tmp_path_factory, toy)
    for name in ("vanilla", "cycle_rev_2L"):
        shutil.copytree(os.path.join(trained, "train", name), os.path.join(work, "runs_s1", name))
    items = [("vanilla", 1), ("cycle_rev_2L", 1), ("vanilla", 2)]
    log = []
    done = queue.work_pairs(budget_curve.SUITE, items, toy, work, results, "tiny",
                            progress=log.append)
    return toy, work, results, done, log


def test_each_run_writes_its_file(finished):
    toy, work, results, done, _ = finished
    assert done == ["vanilla_s1", "cycle_rev_2L_s1", "vanilla_s2"]
    import sacrebleu

    refs = read_lines(os.path.join(toy, "raw", "test.en"))
    for item in done:
        r = json.load(open(os.path.join(results, "runs", f"{item}.json")))
        assert r["updates"] == 8 and r["budget"]["seed"] == int(item[-1])
        assert r["curve"] and r["curve"][-1]["update"] == 8
        assert r["curve"][-1]["valid_loss"] == pytest.approx(r["valid_loss"])
        hyps = read_lines(os.path.join(results, r["test"]["hypotheses"]))
        assert len(hyps) == len(refs) == r["test"]["sentences"]
        assert r["test"]["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    s1 = json.load(open(os.path.join(results, "runs", "vanilla_s1.json")))
    s2 = json.load(open(os.path.join(results, "runs", "vanilla_s2.json")))
    assert s1["curve"] != s2["curve"]  # the seed reaches training
    # a second worker finds nothing left to do
    assert queue.work_pairs(budget_curve.SUITE, [("vanilla", 1)], toy, work, results, "tiny",
                            progress=lambda m: None) == []


def test_learning_curve_sums_interval_seconds_once_per_interval(tmp_path):
    def inner(u, secs):
        return ('x | INFO | train_inner | {"num_updates": "%d", "train_wall": "%d", "wall": "0"}\n'
                % (u, secs))

    def valid(u, loss):
        return 'x | INFO | valid | {"valid_loss": "%s", "valid_num_updates": "%d"}\n' % (loss, u)

    log = tmp_path / "train.log"
    log.write_text(inner(25, 10) + inner(50, 12) + valid(50, "9.5") + inner(75, 11)
                   # killed after update 75, resumed from the checkpoint at 50
                   + inner(75, 13) + inner(100, 9) + valid(100, "8.25"))
    curve = training.learning_curve(str(log))
    assert curve == [{"update": 50, "valid_loss": 9.5, "train_seconds": 22.0},
                     {"update": 100, "valid_loss": 8.25, "train_seconds": 44.0}]


def test_render_tables_from_run_files(finished):
    toy, _, results, _, _ = finished
    paths = budget_report.render(results)  # no milestones/: the equal-updates tables
    text = open(paths["tables"]).read()
    audit = json.load(open(os.path.join(toy, "audit.json")))
    lk = audit["splits"]["test"]["lookup"]
    assert f"| {lk['bleu']:.2f} | {lk['chrf']:.2f} |" in text
    runs = load_runs(results)
    bleus = [r["test"]["bleu"] for r in runs["vanilla"]]
    mean = sum(bleus) / 2
    assert f"{mean:.2f} ± " in text and f"({bleus[0]:.2f}, {bleus[1]:.2f})" in text
    # the shared rows carry a paired bootstrap per seed against vanilla with the same seed
    row = next(l for l in text.splitlines() if l.startswith("| Cycle (rev)"))
    cycle = runs["cycle_rev_2L"][0]["test"]["bleu"]
    assert f"s1: {cycle - bleus[0]:+.2f}, p=" in row and "s2: " not in row
    assert "| universal | not run yet |" in text
    assert os.path.getsize(paths["plot"]) > 10000
    assert len(open(paths["csv"]).read().splitlines()) == 1 + 3


def test_commit_only_the_named_paths(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "init"], check=True)
    (repo / "a.json").write_text("{}")
    (repo / "other.txt").write_text("not mine")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="a@b",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="a@b")
    old = dict(os.environ)
    os.environ.update(env)
    try:
        assert queue.commit([repo / "a.json"], "run a", str(repo))
    finally:
        os.environ.clear()
        os.environ.update(old)
    shown = subprocess.run(git + ["show", "--name-only", "--format=%s"], capture_output=True,
                           text=True).stdout.split()
    assert shown == ["run", "a", "a.json"]
    status = subprocess.run(git + ["status", "--porcelain"], capture_output=True, text=True).stdout
    assert "?? other.txt" in status


def test_a_rebuilt_corpus_with_other_pieces_is_refused(finished, tmp_path):
    """The snapshot pins the references and the dictionaries the committed models index: a
    corpus rebuilt with another segmentation would decode them into other words silently."""
    toy, _, results, _, _ = finished
    pinned = os.path.join(results, "corpus")
    assert open(os.path.join(pinned, "target.dict.txt"), "rb").read() == \
        open(os.path.join(toy, "bin", "dict.en.txt"), "rb").read()
    snapshot_corpus(toy, results)  # the same build: accepted again
    rebuilt = tmp_path / "toy"
    shutil.copytree(toy, rebuilt)
    lines = (rebuilt / "bin" / "dict.en.txt").read_text().splitlines()
    lines[4], lines[5] = lines[5], lines[4]  # two pieces' ids swapped: same size, other words
    (rebuilt / "bin" / "dict.en.txt").write_text("\n".join(lines) + "\n")
    before = {n: open(os.path.join(pinned, n), "rb").read() for n in CORPUS_FILES}
    with pytest.raises(SystemExit, match=rf"--data {rebuilt}: .*dict\.en\.txt differs from "
                                         r".*target\.dict\.txt"):
        snapshot_corpus(str(rebuilt), results)
    assert before == {n: open(os.path.join(pinned, n), "rb").read() for n in CORPUS_FILES}


def test_a_distilled_corpus_with_other_targets_is_refused(finished, tmp_path):
    """The snapshot pins the distilled corpus too (its targets' sha256): the seeds of a
    distilled row must train on one corpus, which a decode on another machine may not give."""
    toy, _, committed, _, _ = finished
    data, results = tmp_path / "toy", tmp_path / "results"
    shutil.copytree(toy, data)
    shutil.copytree(committed, results)
    assert not (results / "distilled").exists()  # no distilled corpus: nothing pinned
    manifest = data / "distilled" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text(json.dumps({"train_sha256": "a" * 64}))
    snapshot_corpus(str(data), str(results))
    pinned = results / "distilled" / "manifest.json"
    assert json.loads(pinned.read_text()) == {"train_sha256": "a" * 64}
    manifest.write_text(json.dumps({"train_sha256": "b" * 64}))
    with pytest.raises(SystemExit, match=rf"--data {data}: the distilled corpus of {manifest} "
                                         rf"\(train_sha256 b+\) differs from {pinned} \(a+\)"):
        snapshot_corpus(str(data), str(results))
    assert json.loads(pinned.read_text()) == {"train_sha256": "a" * 64}
