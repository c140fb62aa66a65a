"""The main job end to end with the tiny budget on the synthetic corpus (no Bible download):
a suite of the run queue (vanilla, then cycle_rev with its update cap), the interleaved
decode, the table; and the one-configuration runs it trains (plan, parameter counts,
restart, resume)."""

import json
import os
import shutil

import pytest

from harness import queue
from harness.configs import CONFIGS, load_budget, select_configs
from harness import main_job
from harness.run_record import train_run
from harness.runs import Run, make_plan, print_plan
from fairseq_shared.data.toydata import SIZES
from helpers_data import shared_main_job, shared_toy_corpus


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    return shared_toy_corpus(tmp_path_factory)


@pytest.fixture(scope="session")
def shared_out(toy, tmp_path_factory):
    # shared with test_timing and test_trace, across the xdist workers: trained once per run
    return shared_main_job(tmp_path_factory, toy)[0]


def test_budget_from_env_and_flags(monkeypatch):
    monkeypatch.setenv("FS_DIM", "64")
    monkeypatch.setenv("FS_UPDATES", "123")
    monkeypatch.setenv("FS_DECODE_SENTENCES", "0")
    args = main_job.build_parser().parse_args(["--updates", "77", "--threads", "1"])
    b = main_job.make_budget(args)
    assert (b["dim"], b["ffn"], b["max_update"], b["threads"]) == (64, 256, 77, 1)  # flag wins
    assert b["subset"] is None  # 0 = decode every test sentence
    assert b["name"] == "demo" and b["L"] == 3


def test_plan_and_parameter_counts(toy, tmp_path):
    log = []
    budget = load_budget("tiny")
    runs = make_plan(CONFIGS, budget, toy, str(tmp_path / "plan"))
    print_plan(runs, budget, log.append)
    assert not os.path.exists(tmp_path / "plan")  # nothing written or trained
    text = "\n".join(log)
    for c in CONFIGS:
        assert f"| {c['name']} |" in text
    p = {r.name: r.params for r in runs}
    L = budget["L"]
    runs = {r.name: r for r in runs}
    assert (runs["cycle_rev_3L"].N, runs["cycle_rev_3L"].M) == (3 * L, L)
    # N = 2M and 3M with M = L: exactly the vanilla parameter count
    for name in ("sequence_2L", "cycle_2L", "cycle_rev_2L", "sequence_3L", "cycle_3L",
                 "cycle_rev_3L"):
        assert p[name] == p["vanilla"], name
    assert p["universal"] < p["attn_shared"] < p["vanilla"]
    assert p["universal"] < p["ffn_shared"] < p["vanilla"]
    # the count is that of a model actually built: sum of unique parameters
    vocab = len(open(os.path.join(toy, "bin", "dict.en.txt")).readlines()) + 4
    d, f = budget["dim"], budget["ffn"]
    layer_enc = 4 * d * d + 4 * d + 2 * d * f + d + f + 4 * d  # attn, ffn, 2 LayerNorms
    layer_dec = layer_enc + 4 * d * d + 4 * d + 2 * d
    assert p["vanilla"] == vocab * d + L * (layer_enc + layer_dec)
    assert p["universal"] == vocab * d + layer_enc + layer_dec


def test_unregistered_architecture_is_skipped_with_reason(toy, tmp_path):
    configs = [dict(name="vanilla", tables=["xiao"], strategy="none", N="L", M="L"),
               dict(name="future", tables=["xiao"], label="Future", arch="transformer_future",
                    strategy="none", N="L", M="L")]
    runs = make_plan(configs, load_budget("tiny"), toy, str(tmp_path))
    assert runs[0].skip_reason is None and runs[0].params > 0
    assert "not registered" in runs[1].skip_reason and runs[1].state() == "skipped"
    log = []
    print_plan(runs, load_budget("tiny"), log.append)
    assert "skip future: architecture 'transformer_future' is not registered" in "\n".join(log)
    with pytest.raises(RuntimeError, match="not registered"):
        train_run(runs[1], "future_s1")


def test_stale_command_detected(toy, tmp_path):
    budget = load_budget("tiny")
    cfg = select_configs(CONFIGS, "vanilla", None)[0]
    run = Run(cfg, budget, toy, str(tmp_path))
    os.makedirs(run.dir)
    with open(os.path.join(run.dir, "plan.json"), "w") as f:
        json.dump({"key": run.key()}, f)
    assert run.state() == "started"
    changed = Run(cfg, load_budget("tiny", ["lr=0.001"]), toy, str(tmp_path))
    assert changed.state() == "stale"
    with pytest.raises(SystemExit):
        load_budget("tiny", ["no_such_key=1"])


def test_main_job_tiny_end_to_end_and_rerun(toy, shared_out, capsys):
    work = os.path.dirname(shared_out)  # runs shared with the other tests
    argv = ["--budget", "tiny", "--data", toy, "--work", work]
    assert main_job.main(argv) == 0
    out = capsys.readouterr().out
    for k in range(1, 6):
        assert f"=== stage {k}/5" in out or (k == 4 and "and 4: decode" in out)
    assert "using the prepared corpus" in out
    table = open(os.path.join(shared_out, "main_job.md")).read()
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
    # one queue record per model, written by the queue
    for name in main_job.CONFIG_NAMES:
        record = json.load(open(queue.result_path(shared_out, name, 1)))
        assert record["updates"] == 8 and record["curve"] is not None

    # re-running skips finished stages
    assert main_job.main(argv) == 0
    out2 = capsys.readouterr().out
    assert "vanilla: already trained" in out2 and "cycle_rev_2L: already trained" in out2
    assert "[decode] up to date" in out2
    assert SIZES["test"] == 23


def test_rows_lookup_restart_and_resume(toy, shared_out, tmp_path):
    """The rows of the table, the lookup baseline on the decoded sentences, a restart that
    trains and decodes nothing, and a run killed after its final checkpoint."""
    budget = load_budget("tiny")
    # this test decodes into the run dir and removes a done.json: a copy of the shared one
    shutil.copytree(shared_out, tmp_path / "main_job")
    shared_out = str(tmp_path / "main_job")
    log = []
    res = main_job.run_main_job(toy, shared_out, budget, log.append)
    rows = {r["name"]: r for r in res["rows"]}
    assert set(rows) == set(main_job.CONFIG_NAMES)
    for r in rows.values():
        assert r["updates"] == budget["max_update"]
        assert r["sentences"] == SIZES["test"] and r["bleu"] is not None and r["chrf"] is not None
        assert r["train_wps"] > 0 and r["decode_tokens_per_s"] > 0
    assert rows["vanilla"]["train_speed_vs_vanilla"] == pytest.approx(1.0)
    assert rows["vanilla"]["decode_speed_vs_vanilla"] == pytest.approx(1.0)
    assert rows["cycle_rev_2L"]["params"] == rows["vanilla"]["params"]
    # the corpus's lookup baseline stands in the table, scored on the decoded sentences
    import sacrebleu

    refs = open(os.path.join(toy, "raw", "test.en")).read().splitlines()
    lookup = open(os.path.join(toy, "lookup.test.en")).read().splitlines()
    expected = round(sacrebleu.corpus_bleu(lookup, [refs]).score, 2)
    assert res["lookup"]["bleu"] == expected and res["lookup"]["sentences"] == len(refs)
    assert res["table"].count("| lookup baseline (no model: closest training verse) |") == 1
    assert f"| {expected:.2f} |" in res["table"]
    near = res["lookup"]["near_duplicate_positions"]
    for r in rows.values():  # BLEU without the near-duplicates, where there are any
        assert ("bleu_clean" in r) == bool(near)
    assert "version:2.6" in res["decode"]["bleu_signature"]

    # restart: everything is skipped, nothing retrained or re-decoded
    ckpts = {n: r["checkpoint"] for n, r in res["records"].items()}
    mtimes = {n: os.path.getmtime(p) for n, p in ckpts.items()}
    log2 = []
    res2 = main_job.run_main_job(toy, shared_out, budget, log2.append)
    text = "\n".join(log2)
    for n in rows:
        assert f"{n}: already trained" in text
        assert os.path.getmtime(ckpts[n]) == mtimes[n]
    assert "[decode] up to date" in text
    assert [r["bleu"] for r in res2["rows"]] == [r["bleu"] for r in res["rows"]]

    # killed after its final checkpoint but before it was marked done: marked done from
    # checkpoint_last.pt without training again (fairseq would add one update)
    run = main_job.plan(toy, shared_out, budget, ["vanilla"])[0]
    os.remove(os.path.join(run.dir, "done.json"))
    log3 = []
    assert train_run(run, "vanilla_s1", log3.append)["updates"] == budget["max_update"]
    assert any("vanilla: already complete in checkpoint_last.pt (8 updates)" in m for m in log3)
    assert os.path.getmtime(run.checkpoint) == mtimes["vanilla"]
    done = json.load(open(os.path.join(run.dir, "done.json")))
    assert done["updates"] == budget["max_update"]


def test_interrupted_run_resumes_from_checkpoint_last(toy, shared_out, tmp_path):
    """A run stopped at update 8 (as if killed after a save) continues from there."""
    configs = select_configs(CONFIGS, "vanilla", None)
    out = str(tmp_path / "resume")
    # the shared main job's vanilla is this run (same budget and command) trained to 8 updates
    run_dir = os.path.join(out, "runs", "vanilla")
    shutil.copytree(os.path.join(shared_out, "train", "vanilla"), run_dir)
    assert json.load(open(os.path.join(run_dir, "done.json")))["updates"] == 8
    full = load_budget("tiny", ["max_update=12"])  # same run, higher update limit
    runs = make_plan(configs, full, toy, out)
    assert runs[0].state() == "partial"
    log = []
    train_run(runs[0], "vanilla", log.append)
    assert any("vanilla: resuming from checkpoint_last.pt" in m for m in log)
    train_log = open(os.path.join(run_dir, "train.log")).read()
    assert "Loaded checkpoint" in train_log and "@ 8 updates" in train_log
    assert train_log.count("done training") == 2
    assert json.load(open(os.path.join(run_dir, "done.json")))["updates"] == 12


def test_equal_updates_follows_vanilla(toy, shared_out, tmp_path):
    """equal_updates: cycle_rev gets the updates vanilla reached in its time cap."""
    main_job.train_models(toy, shared_out, load_budget("tiny"), lambda m: None)
    out = str(tmp_path / "out")
    shutil.copytree(os.path.join(shared_out, "train"), os.path.join(out, "train"))
    budget = load_budget("tiny", ["max_update=12", "max_minutes=5"])
    budget["equal_updates"] = True
    # pretend vanilla stopped at 8 updates because of its 5-minute cap under these limits
    done_path = os.path.join(out, "train", "vanilla", "done.json")
    done = json.load(open(done_path))
    done["limits"] = {"max_update": 12, "max_minutes": 5}
    json.dump(done, open(done_path, "w"))
    log = []
    records = main_job.train_models(toy, out, budget, log.append)
    text = "\n".join(log)
    assert "vanilla: already trained (8 updates)" in text
    assert "cycle_rev_2L: max_update 12 -> 8" in text
    assert "cycle_rev_2L: already trained" in text
    assert "starting" not in text and "resuming" not in text
    assert records["vanilla"]["updates"] == records["cycle_rev_2L"]["updates"] == 8


def test_main_job_dry_run_builds_nothing(toy, tmp_path, capsys):
    assert main_job.main(["--budget", "tiny", "--data", toy, "--work", str(tmp_path),
                          "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "| vanilla |" in out and "| cycle_rev_2L |" in out and "nothing trained" in out
    assert not os.path.exists(tmp_path / "main_job" / "runs")


def test_deep_shared_encoder_config_and_the_distilled_ones(toy, tmp_path):
    """issue 35: 12+1 over 6 encoder sets has exactly 6+1's parameters; a ``data: distilled``
    configuration trains on <corpus>/distilled/bin and is skipped, naming the command, without it."""
    budget = load_budget("tiny", ["L=3"])
    names = "vanilla_2L_dec1,cycle_rev_4L_dec1,cycle_rev_4L_dec1_distilled"
    plain, deep, distilled = make_plan(select_configs(CONFIGS, names, None),
                                       budget, toy, str(tmp_path))
    assert (deep.N, deep.M, deep.dec_N) == (12, 6, 1) and deep.params == plain.params
    flags = " ".join(deep.model_flags())
    assert ("--encoder-layers 12" in flags and "--encoder-share-strategy cycle_rev "
            "--encoder-share-scope all --encoder-unique-layers 6" in flags)
    assert "--decoder-layers 1" in flags and "--decoder-unique-layers" not in flags
    assert "python -m fairseq_shared.cli.distill" in distilled.skip_reason
    root = os.path.join(toy, "distilled")
    os.makedirs(root)
    with open(os.path.join(root, "manifest.json"), "w") as f:
        f.write("{}")
    try:
        run = Run(distilled.config, budget, toy, str(tmp_path))
        assert os.path.join(root, "bin") in run.train_command()
        assert os.path.join(toy, "bin") not in run.train_command()
    finally:
        shutil.rmtree(root)
