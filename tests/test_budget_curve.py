"""The budget-curve suite end to end on the toy corpus (tiny budget, milestones 10 and 30): a
worker killed with SIGKILL between two milestones and restarted writes what an uninterrupted
worker writes; training in stages equals one long run; the tables and plots render from the
written files; the early-stop rule counted in validations."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from harness import budget_curve, budget_report, configs, milestones, reproduce
from harness.configs import BUDGETS, CONFIGS, load_budget, row_fields, select_configs
from harness.corpus import CORPUS_FILES
from harness.run_record import train_run
from harness.training import learning_curve
from harness.runs import plan_run
from helpers_queue import attempts, run_worker, start_worker, toy  # noqa: F401  (toy: a fixture)


WORKER = ("--budget", "tiny_milestones", "--queue", "vanilla:1")


def worker(toy, root, *args):
    return start_worker("budget", toy, root, *WORKER, *args)


def worked(toy, root, *args):
    """What :func:`worker`'s process prints, from the same worker run in this process."""
    return run_worker("budget", toy, root, *WORKER, *args)


def written(root):
    """Every record of the run, without what depends on the clock."""
    results = root / "results"
    out = {}
    for path in sorted([*results.glob("milestones/*.json"), *results.glob("runs/*.json")]):
        r = json.loads(path.read_text())
        out[path.name] = {
            "update": r.get("update"), "updates": r.get("updates"),
            "valid_loss": r.get("valid_loss"), "test": {k: r["test"][k] for k in ("bleu", "chrf")},
            "curve": [(p["update"], p["valid_loss"]) for p in r["curve"]],
            "average_of": r.get("average_of"),
            "milestones": [(m["update"], m["bleu"]) for m in r.get("milestones", [])]}
    out["hyps"] = {p.name: p.read_text() for p in sorted(results.glob("hyps/*"))}
    return out


@pytest.fixture(scope="module")
def uninterrupted(toy, tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    out = worked(toy, root)
    assert "this worker finished: vanilla_s1" in out, out
    return root


def test_each_milestone_is_written_then_the_averaged_final(uninterrupted, toy):
    rec = written(uninterrupted)
    assert sorted(rec) == ["hyps", "vanilla_s1.json", "vanilla_s1_u10.json", "vanilla_s1_u30.json"]
    assert sorted(rec["hyps"]) == [f"vanilla_s1_{s}.en" for s in ("avg", "u10", "u30")]
    final = rec["vanilla_s1.json"]
    assert final["updates"] == 30
    # the last 3 kept interval checkpoints (keep_interval_updates=3; 24 updates an epoch)
    assert final["average_of"] == [f"checkpoint_{e}_{u}.pt" for e, u in ((2, 30), (1, 20), (1, 10))]
    for k in (10, 30):
        m = rec[f"vanilla_s1_u{k}.json"]
        assert m["update"] == k and m["curve"][-1][0] <= k
        assert m["valid_loss"] == dict(final["curve"])[k]
    assert final["milestones"] == [(k, rec[f"vanilla_s1_u{k}.json"]["test"]["bleu"])
                                   for k in (10, 30)]
    # two attempts of fairseq-train (to 10, then to 30): the same as one 30-update run
    assert attempts(uninterrupted / "work" / "runs_s1" / "vanilla") == 2
    # the averaged model is kept in the work directory (never in the results: no model
    # binaries in main), weights only, equal to the averaged checkpoint it decoded
    kept = json.loads((uninterrupted / "results" / "runs" / "vanilla_s1.json").read_text())
    assert kept["model_kept"] == str(uninterrupted / "work" / "models" / "vanilla_s1.pt")
    assert not list((uninterrupted / "results").rglob("*.pt"))
    model = torch.load(kept["model_kept"], weights_only=False)
    averaged = torch.load(uninterrupted / "work" / "runs_s1" / "vanilla" / "average_last3_u30.pt",
                          weights_only=False)
    assert "last_optimizer_state" not in model and model["cfg"] == averaged["cfg"]
    assert model["model"].keys() == averaged["model"].keys()
    assert all(torch.equal(model["model"][k], averaged["model"][k]) for k in model["model"])


def test_stages_equal_one_long_run(uninterrupted, toy, tmp_path):
    # the one-stage suite's run, trained only: its record's curve is this log's
    budget = load_budget("tiny", ["max_update=30", "save_interval_updates=10", "seed=1"])
    run = plan_run(select_configs(CONFIGS, "vanilla", None)[0], 1, toy, str(tmp_path), budget,
                   lambda m: None)
    train_run(run, "vanilla_s1", lambda m: None)
    one = learning_curve(os.path.join(run.dir, "train.log"))
    staged = written(uninterrupted)["vanilla_s1.json"]
    assert [(p["update"], p["valid_loss"]) for p in one] == staged["curve"]


def test_a_run_holds_its_state_reading_its_log_and_checkpoint_once_per_chunk(toy, tmp_path,
                                                                             monkeypatch):
    """Issue 54, item 3: per chunk of training the log is parsed once and the checkpoint read
    once (twice where the chunk resumes), and what the milestones ask is what the run holds."""
    from harness import run_record, training

    reads = {"log": 0, "checkpoint": 0}

    def counted(key, f):
        def wrapper(*a, **k):
            reads[key] += 1
            return f(*a, **k)
        return wrapper

    monkeypatch.setattr(training, "log_records", counted("log", training.log_records))
    progress = counted("checkpoint", training.checkpoint_progress)
    monkeypatch.setattr(training, "checkpoint_progress", progress)
    monkeypatch.setattr(run_record, "checkpoint_progress", progress)
    budget = load_budget("tiny_milestones", ["seed=1"])
    run = plan_run(select_configs(CONFIGS, "vanilla", None)[0], 1, toy, str(tmp_path), budget,
                   lambda m: None)
    seen = []

    def at_milestone(k):
        seen.append((k, run_record.checkpoint_updates(run),
                     [p["update"] for p in run_record.run_curve(run)]))
        return {"update": k}

    staged = milestones.run_stages(run, [10, 30], 0, at_milestone, lambda k: None,
                                   lambda m: None)
    assert [r["update"] for r in staged["milestones"]] == [10, 30]
    # the log as the run found it (none yet), then once per chunk; the checkpoint once per
    # chunk, and once more where the second resumes
    assert reads == {"log": 3, "checkpoint": 3}
    assert [(k, u) for k, u, _ in seen] == [(10, 10), (30, 30)]
    assert seen[1][2] == [p["update"] for p in training.learning_curve(
        os.path.join(run.dir, "train.log"))] and 30 in seen[1][2]


def test_kill_9_between_milestones_then_restart_writes_the_same(uninterrupted, toy, tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    first = worker(toy, tmp_path, "--commit")
    u10 = tmp_path / "results" / "milestones" / "vanilla_s1_u10.json"
    deadline = time.time() + 120
    while not u10.exists() and time.time() < deadline:
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert not (tmp_path / "results" / "milestones" / "vanilla_s1_u30.json").exists()
    out, _ = worker(toy, tmp_path, "--commit").communicate(timeout=300)
    assert "this worker finished: vanilla_s1" in out, out
    assert written(tmp_path) == written(uninterrupted)
    # every milestone committed (by the killed worker or, if it died first, by the next)
    git = ["git", "-C", str(tmp_path)]
    log = subprocess.run([*git, "log", "--format=%s"], capture_output=True, text=True).stdout
    assert [line.split(" (")[0] for line in log.splitlines()] == [
        "budget: vanilla_s1 finished", "budget: vanilla_s1 at 30 updates",
        "budget: vanilla_s1 at 10 updates", f"budget: corpus snapshot of {toy}"]
    left = subprocess.run([*git, "status", "--porcelain", "results/milestones", "results/hyps",
                           "results/runs", "results/corpus"], capture_output=True, text=True).stdout
    assert left == ""
    tracked = subprocess.run([*git, "ls-files", "results/corpus"], capture_output=True,
                             text=True).stdout.split()
    assert sorted(tracked) == sorted(f"results/corpus/{n}" for n in CORPUS_FILES), \
        "the references and lookup baseline the tables read are committed before the first milestone"


def test_a_milestone_whose_training_is_lost_is_trained_again(uninterrupted, toy, tmp_path):
    # a fresh machine: the results hold the 10-update milestone, the work directory with the
    # training that made it is gone; the run starts again and measures it again
    shutil.copytree(uninterrupted / "results", tmp_path / "results")
    (tmp_path / "results" / "runs" / "vanilla_s1.json").unlink()
    (tmp_path / "results" / "milestones" / "vanilla_s1_u30.json").unlink()
    u10 = tmp_path / "results" / "milestones" / "vanilla_s1_u10.json"
    lost = json.loads(u10.read_text())
    lost["test"]["bleu"] = 99.0
    u10.write_text(json.dumps(lost))
    out = worked(toy, tmp_path)
    assert "the 10-update milestone's training is lost (0 updates here)" in out, out
    assert written(tmp_path) == written(uninterrupted)
    final = json.loads((tmp_path / "results" / "runs" / "vanilla_s1.json").read_text())
    assert final["milestones_trained_again"] == [10]
    assert "milestones_trained_again" not in json.loads(
        (uninterrupted / "results" / "runs" / "vanilla_s1.json").read_text())


def as_written(record, name):
    """``record`` as a worker of configuration ``name`` writes it: its name and its row's
    fields under the toy budget (L = 2)."""
    config = select_configs(CONFIGS, name, None)[0]
    return {**record, "name": name, **row_fields(config, load_budget("tiny_milestones"))}


def several_configurations(uninterrupted, results):
    """The toy run's results, with other configurations' records as workers would write them."""
    shutil.copytree(uninterrupted / "results", results)
    # a second configuration with the same seed
    for path in [*results.glob("milestones/*.json"), *results.glob("runs/*.json")]:
        r = as_written(json.loads(path.read_text()), "cycle_rev_2L")
        r["test"]["bleu"] += 1.0
        path.with_name(path.name.replace("vanilla", "cycle_rev_2L")).write_text(json.dumps(r))
    # the SAN pair: SAN 2+4 is compared with vanilla 2+2 and with its unshared vanilla 2+4
    for name, delta in [("vanilla_dec2L", 0.5), ("san_dec2L", 0.25)]:
        r = as_written(json.loads((results / "runs" / "vanilla_s1.json").read_text()), name)
        r["test"]["bleu"] += delta
        (results / "runs" / f"{name}_s1.json").write_text(json.dumps(r))
    # a third with milestones but no final record yet (a run still training)
    for path in results.glob("milestones/*.json"):
        r = as_written(json.loads(path.read_text()), "vanilla_2L_dec1")
        path.with_name(path.name.replace("vanilla", "vanilla_2L_dec1")).write_text(json.dumps(r))


def test_render_tables_and_plot_from_the_files(uninterrupted, tmp_path):
    results = tmp_path / "results"
    several_configurations(uninterrupted, results)
    paths = budget_report.render(str(results))
    text = Path(paths["tables"]).read_text()
    final = json.loads((results / "runs" / "vanilla_s1.json").read_text())
    u10 = json.loads((results / "milestones" / "vanilla_s1_u10.json").read_text())
    row = next(l for l in text.splitlines() if l.startswith("| Vanilla |"))
    assert f"| {u10['test']['bleu']:.2f} (one seed) |" in row
    assert f"| {final['test']['bleu']:.2f} (one seed) | 30 |" in row
    cycle = next(l for l in text.splitlines() if l.startswith("| Cycle (rev) |"))
    # one seed of each: no seed variance to count, so no verdict, and the single models'
    # bootstrap is labelled as that
    assert "| +1.00 (no seed variance measured) | s1: +1.00, p=" in cycle
    assert "single models of one seed against vanilla 3+3's (test sampling only" in text
    assert "against" not in cycle  # its unshared pair is vanilla 3+3 itself
    san = next(l for l in text.splitlines() if l.startswith("| SAN (decoder 2L) |"))
    assert san.split(" | ")[-1].startswith("s1: +0.25, p=")
    assert f"against Vanilla (decoder 2L) {final['N']}+{2 * final['N']}: s1: -0.25, p=" in san
    assert "against" not in next(l for l in text.splitlines()
                                 if l.startswith("| Vanilla (decoder 2L) |"))
    lookup = json.loads((results / "corpus" / "audit.json").read_text())["splits"]["test"]["lookup"]
    assert f"| {lookup['bleu']:.2f} | {lookup['bleu']:.2f} |" in text
    assert "Vanilla (2L layers)" not in text  # no records, no row
    # its label and depth are its milestones' (4+1 under the toy budget's L = 2), no final yet
    training = next(l for l in text.splitlines() if "deep encoder" in l)
    assert training.startswith("| Vanilla, deep encoder 2L / decoder 1 | 4+1 |")
    assert training.split(" | ")[-3:-1] == ["-", "-"]
    assert final["test"]["bleu_signature"] in text
    assert os.path.getsize(paths["plot"]) > 10000
    # the README's table: the finished configurations, SAN's row as in tables.md, no frontier yet
    summary = Path(paths["summary"]).read_text().splitlines()
    san_row = next(l for l in summary if l.startswith("| `san_dec2L`: "))
    versus = san.split(" | ")[-2]  # tables.md's cell counting seeds, vs 3+3 and vs 3+6
    assert versus.startswith("+0.25 (no seed variance measured); against Vanilla (decoder 2L)")
    assert f"| {versus} |" in san_row and san_row.endswith("| not measured | - |")
    assert not any("vanilla_2L_dec1" in l for l in summary)  # still training: no final model


def rendered(results):
    return {p.relative_to(results): p.read_bytes() for p in sorted(results.rglob("*"))
            if p.suffix in (".md", ".png")}


def test_editing_the_catalogue_leaves_the_rendered_tables_as_they_are(uninterrupted, tmp_path,
                                                                      monkeypatch):
    results = tmp_path / "results"
    several_configurations(uninterrupted, results)
    budget_report.render(str(results))
    before = rendered(results)
    assert any(b"Vanilla, deep encoder 2L / decoder 1 | 4+1" in t for t in before.values())
    # a new study edits the catalogue: labels, depths, pairs, data, and budgets' defaults
    for config in CONFIGS:
        monkeypatch.setitem(config, "label", f"renamed {config['name']}")
        monkeypatch.setitem(config, "pair", "universal")
        monkeypatch.setitem(config, "data", "distilled")
        monkeypatch.setitem(config, "N", "3L")
    for budget in BUDGETS.values():
        for key, value in [("L", 5), ("threads", 3), ("save_interval_updates", 7)]:
            monkeypatch.setitem(budget, key, value)
    budget_report.render(str(results))
    assert rendered(results) == before


def test_reproduce_trains_a_committed_row_again_into_a_fresh_folder(uninterrupted, toy,
                                                                    tmp_path):
    """Issue 54, item 7: the documented reproduction (results/bible_budget/REPRODUCE.md) at toy
    scale: the row trained again under the budget its record carries, into a fresh folder,
    compared with the committed one; the committed folder untouched, nothing committed."""
    source, fresh = uninterrupted / "results", tmp_path / "fresh"
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    out = run_worker("budget", toy, tmp_path, "--from", str(source), "--rows", "vanilla_s1",
                     "--results", str(fresh), command="reproduce")
    assert "this worker finished" not in out and (fresh / "runs" / "vanilla_s1.json").exists(), out
    committed = json.loads((source / "runs" / "vanilla_s1.json").read_text())
    reproduced = json.loads((fresh / "runs" / "vanilla_s1.json").read_text())
    assert reproduced["budget"] == {**committed["budget"], "name": "vanilla_s1.json"}
    row = next(l for l in (fresh / reproduce.REPORT).read_text().splitlines()
               if l.startswith("| vanilla_s1 |"))
    bleu = f"{committed['test']['bleu']:.2f}"
    assert row == (f"| vanilla_s1 | 30 / 30 | {bleu} / {bleu} | "
                   f"{committed['average_valid_loss']:.3f} / {committed['average_valid_loss']:.3f}"
                   " | identical | 10: identical; 30: identical |")
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before
    assert not (fresh / ".git").exists()
    with pytest.raises(SystemExit, match="--rows: vanilla_s9 not in .*; committed: vanilla_s1"):
        reproduce.select(reproduce.committed_rows(str(source)), "vanilla_s9", str(source))
    with pytest.raises(SystemExit, match="that is the committed folder"):
        reproduce.prepare(str(source), str(source), toy)


def test_each_record_carries_its_comparison_pair():
    pair = {c["name"]: configs.row_fields(c, load_budget("budget_curve"))["pair"] for c in CONFIGS}
    assert pair["san_dec2L"] == "vanilla_dec2L"
    # issue 35: distillation's gain per architecture, and 12+1 against the 6+1 of its size
    assert pair["cycle_rev_4L_dec1"] == "vanilla_2L_dec1"
    for name in ["vanilla_2L_dec1", "cycle_rev_4L_dec1"]:
        assert pair[f"{name}_distilled"] == name
    assert pair["vanilla_distilled"] is None  # vanilla 3+3: every row's column
    for name in ["vanilla_dec2L", "cycle_rev_2L", "attn_shared", "vanilla_2L_dec1", "nodec_ffn",
                 "one_wide_ffn", "vanilla_2L"]:
        assert pair[name] is None, name


def test_early_stop_counts_validations_at_the_checkpoint_interval():
    curve = [{"update": u, "valid_loss": v} for u, v in
             [(10, 5.0), (20, 4.0), (24, 3.0), (30, 4.1), (40, 4.0), (50, 4.2)]]
    # 24 is an epoch-end validation: not counted, it has no kept checkpoint
    assert milestones.early_stop(curve, 3, 10) == 50
    assert milestones.early_stop(curve, 4, 10) is None
    assert milestones.early_stop(curve, 0, 10) is None
    assert milestones.next_check(curve, 4, 10) == 60  # best at 20: 20 + 4 intervals
    assert milestones.next_check(curve[:2], 4, 10) == 60
    assert milestones.next_check([], 2, 10) == 20


def test_a_distilled_student_trains_to_the_budget_without_the_early_stop():
    budget = load_budget("budget_curve")
    assert int(budget["patience"]) == 10
    configs = {c["name"]: c for c in CONFIGS}
    assert budget_curve.patience(configs["vanilla_2L_dec1"], budget) == 10
    for name in ("vanilla_distilled", "vanilla_2L_dec1_distilled", "cycle_rev_4L_dec1_distilled"):
        assert budget_curve.patience(configs[name], budget) == 0


def test_milestones_and_queue_order():
    assert milestones.parse_milestones("1000,2000,4000,8000", 8000) == [1000, 2000, 4000, 8000]
    with pytest.raises(SystemExit, match="increasing positive updates up to max_update=100"):
        milestones.parse_milestones("50,200", 100)
    assert budget_curve.QUEUE[:7] == [
        ("vanilla", 1), ("cycle_rev_2L", 1), ("vanilla_2L", 1), ("vanilla_2L_dec1", 1),
        ("vanilla", 2), ("cycle_rev_2L", 2), ("vanilla_2L_dec1", 2)]
    assert budget_curve.QUEUE[7:] == [(n, 1) for n in ["attn_shared", "vanilla_dec2L", "nodec_ffn",
                                                      "san_dec2L", "one_wide_ffn"]] + [
        ("vanilla_2L", 2)]
    assert sorted(n for n, _ in budget_curve.QUEUE) == sorted(
        budget_curve.CORE + budget_curve.TWO_SEEDS + budget_curve.REST
        + budget_curve.ONE_WIDE_FFN + ["vanilla_2L"])
    with pytest.raises(SystemExit, match="--queue: unknown configuration 'universal'"):
        budget_curve.parse_queue("universal:1")


def test_averaged_milestones_decode_and_validate_the_final_stages_average(uninterrupted, toy,
                                                                        tmp_path):
    """``average_milestones`` (the 16,000-update budget): every milestone also measures the
    average of its last checkpoints, as the final stage does, and the final stage reuses the
    last milestone's; the averaged valid loss is fairseq-validate's on that average, which on
    a plain checkpoint gives the loss training logged."""
    from harness.corpus import corpus_paths
    from harness.valid_loss import valid_loss

    # the same run (its key leaves out the limits and the milestones) already trained to 30
    # updates: this worker measures milestone 30 from it, then trains on to 40
    shutil.copytree(uninterrupted / "work" / "runs_s1", tmp_path / "work" / "runs_s1")
    out = worked(toy, tmp_path, "--set", "average_milestones=true", "--set", "max_update=40",
                 "--set", "milestones=30,40")
    assert "this worker finished: vanilla_s1" in out, out
    results = tmp_path / "results"
    final = json.loads((results / "runs" / "vanilla_s1.json").read_text())
    u30, u40 = (json.loads((results / "milestones" / f"vanilla_s1_u{k}.json").read_text())
                for k in (30, 40))
    # keep_interval_updates=3, 24 updates an epoch
    assert u30["average"]["of"] == ["checkpoint_2_30.pt", "checkpoint_1_20.pt",
                                    "checkpoint_1_10.pt"]
    assert u40["average"]["of"] == final["average_of"] == [
        "checkpoint_2_40.pt", "checkpoint_2_30.pt", "checkpoint_1_20.pt"]
    assert u40["average"]["test"] == final["test"]  # the final stage decoded nothing again
    assert sorted(p.name for p in results.glob("hyps/*")) == [
        f"vanilla_s1_{s}.en" for s in ("u30", "u30_avg", "u40", "u40_avg")]
    assert final["average_valid_loss"] == u40["average"]["valid_loss"]
    assert final["milestones"][0]["average"]["bleu"] == u30["average"]["test"]["bleu"]
    # fairseq-validate on a validated checkpoint gives the loss training logged
    run_dir = tmp_path / "work" / "runs_s1" / "vanilla"
    logged = dict((p["update"], p["valid_loss"]) for p in final["curve"])
    measured = valid_loss(str(run_dir / "checkpoint_2_30.pt"), corpus_paths(toy)[0])["loss"]
    assert measured == logged[30] == u30["valid_loss"]
    assert u30["average"]["valid_loss"] != logged[30]  # three checkpoints averaged: a new model
