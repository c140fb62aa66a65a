"""reproduce.py with the tiny budget: plan, end-to-end tables, restart and resume."""

import json
import os
import shutil

import pytest

from fairseq_shared.experiments.drivers import reproduce
from fairseq_shared.experiments.runs import Run, make_plan
from fairseq_shared.experiments.tables import collect_rows, render_tables
from fairseq_shared.data.toydata import SIZES, build_toy_corpus


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    return build_toy_corpus(str(tmp_path_factory.getbasetemp() / "toy"))


@pytest.fixture(scope="session")
def shared_out(tmp_path_factory):
    # shared with test_timing/test_main_job: same budget + configs -> trained once
    return str(tmp_path_factory.getbasetemp() / "work" / "main_job")


def quiet(log):
    return lambda m: log.append(m)


def test_dry_run_plan_and_parameter_counts(toy, tmp_path):
    log = []
    budget = reproduce.load_budget("tiny")
    res = reproduce.reproduce(toy, str(tmp_path / "plan"), budget, reproduce.CONFIGS,
                              dry_run=True, progress=quiet(log))
    assert not os.path.exists(tmp_path / "plan")  # nothing written or trained
    text = "\n".join(log)
    for c in reproduce.CONFIGS:
        assert f"| {c['name']} |" in text
    p = {r.name: r.params for r in res["runs"]}
    L = budget["L"]
    runs = {r.name: r for r in res["runs"]}
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
    runs = make_plan(configs, reproduce.load_budget("tiny"), toy, str(tmp_path))
    assert runs[0].skip_reason is None and runs[0].params > 0
    assert "not registered" in runs[1].skip_reason and runs[1].state() == "skipped"
    table = render_tables(collect_rows(runs, None), reproduce.load_budget("tiny"), None)
    assert "Future (skipped: architecture 'transformer_future' is not registered" in table


def test_deep_shared_encoder_config_and_the_distilled_ones(toy, tmp_path):
    """issue 35: 12+1 over 6 encoder sets has exactly 6+1's parameters; a ``data: distilled``
    configuration trains on <corpus>/distilled/bin and is skipped, naming the command, without it."""
    budget = reproduce.load_budget("tiny", ["L=3"])
    names = "vanilla_2L_dec1,cycle_rev_4L_dec1,cycle_rev_4L_dec1_distilled"
    plain, deep, distilled = make_plan(reproduce.select_configs(reproduce.CONFIGS, names, None),
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


def test_stale_command_detected(toy, tmp_path):
    budget = reproduce.load_budget("tiny")
    cfg = reproduce.select_configs(reproduce.CONFIGS, "vanilla", None)[0]
    run = Run(cfg, budget, toy, str(tmp_path))
    os.makedirs(run.dir)
    with open(os.path.join(run.dir, "plan.json"), "w") as f:
        json.dump({"key": run.key()}, f)
    assert run.state() == "started"
    changed = Run(cfg, reproduce.load_budget("tiny", ["lr=0.001"]), toy, str(tmp_path))
    assert changed.state() == "stale"
    with pytest.raises(SystemExit):
        reproduce.load_budget("tiny", ["no_such_key=1"])


def test_tiny_end_to_end_restart_and_resume(toy, shared_out):
    from fairseq.models import ARCH_MODEL_REGISTRY

    names = "vanilla,cycle_rev_2L" + (",san" if "transformer_san" in ARCH_MODEL_REGISTRY else "")
    configs = reproduce.select_configs(reproduce.CONFIGS, names, None)
    budget = reproduce.load_budget("tiny")
    log = []
    res = reproduce.reproduce(toy, shared_out, budget, configs, progress=quiet(log))
    rows = {r["name"]: r for r in res["rows"]}
    assert set(rows) == set(names.split(","))
    for r in rows.values():
        assert r["updates"] == budget["max_update"]
        assert r["sentences"] == SIZES["test"] and r["bleu"] is not None and r["chrf"] is not None
        assert r["train_wps"] > 0 and r["decode_tokens_per_s"] > 0
    assert rows["vanilla"]["train_speed_vs_vanilla"] == pytest.approx(1.0)
    assert rows["vanilla"]["decode_speed_vs_vanilla"] == pytest.approx(1.0)
    assert rows["cycle_rev_2L"]["params"] == rows["vanilla"]["params"]
    tables = open(res["paths"]["tables"]).read()
    for heading in ("Takase & Kiyono", "ALBERT", "Xiao et al."):
        assert heading in tables
    assert "| Cycle (rev) | 2 | 4 |" in tables
    for png in ("bleu_vs_params.png", "bleu_vs_speed.png"):
        with open(os.path.join(shared_out, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # the corpus's lookup baseline stands in every table, scored on the decoded sentences
    import sacrebleu

    refs = open(os.path.join(toy, "raw", "test.en")).read().splitlines()
    lookup = open(os.path.join(toy, "lookup.test.en")).read().splitlines()
    expected = round(sacrebleu.corpus_bleu(lookup, [refs]).score, 2)
    assert res["lookup"]["bleu"] == expected and res["lookup"]["sentences"] == len(refs)
    assert tables.count(f"| lookup baseline (no model: closest training verse) |") == 3
    assert f"BLEU {expected:.2f}" in tables
    near = res["lookup"]["near_duplicate_positions"]
    for r in rows.values():  # BLEU without the near-duplicates, where there are any
        assert ("bleu_clean" in r) == bool(near)
    saved = json.load(open(res["paths"]["json"]))
    assert saved["budget"]["name"] == "tiny" and len(saved["rows"]) == len(rows)
    assert "version:2.6" in saved["bleu_signature"]

    # restart: everything is skipped, nothing retrained or re-decoded
    mtimes = {n: os.path.getmtime(os.path.join(shared_out, "runs", n, "checkpoint_last.pt"))
              for n in rows}
    log2 = []
    res2 = reproduce.reproduce(toy, shared_out, budget, configs, progress=quiet(log2))
    text = "\n".join(log2)
    for n in rows:
        assert f"{n}: already trained" in text
        assert os.path.getmtime(os.path.join(shared_out, "runs", n, "checkpoint_last.pt")) == mtimes[n]
    assert "[decode] up to date" in text
    assert [r["bleu"] for r in res2["rows"]] == [r["bleu"] for r in res["rows"]]

    # killed after its final checkpoint but before it was marked done: marked done from
    # checkpoint_last.pt without training again (fairseq would add one update)
    os.remove(os.path.join(shared_out, "runs", "vanilla", "done.json"))
    log3 = []
    reproduce.reproduce(toy, shared_out, budget, configs[:1], progress=quiet(log3),
                        skip_decode=True)
    assert any("vanilla: already complete in checkpoint_last.pt (8 updates)" in m for m in log3)
    assert os.path.getmtime(os.path.join(shared_out, "runs", "vanilla", "checkpoint_last.pt")) \
        == mtimes["vanilla"]
    done = json.load(open(os.path.join(shared_out, "runs", "vanilla", "done.json")))
    assert done["updates"] == budget["max_update"]


def test_interrupted_run_resumes_from_checkpoint_last(toy, tmp_path):
    """A run stopped at update 4 (as if killed after a save) continues from there."""
    configs = reproduce.select_configs(reproduce.CONFIGS, "vanilla", None)
    out = str(tmp_path / "resume")
    short = reproduce.load_budget("tiny", ["max_update=4"])
    reproduce.reproduce(toy, out, short, configs, skip_decode=True, progress=lambda m: None)
    run_dir = os.path.join(out, "runs", "vanilla")
    assert json.load(open(os.path.join(run_dir, "done.json")))["updates"] == 4
    full = reproduce.load_budget("tiny")  # same run, higher update limit
    runs = make_plan(configs, full, toy, out)
    assert runs[0].state() == "partial"
    log = []
    reproduce.reproduce(toy, out, full, configs, skip_decode=True, progress=log.append)
    assert any("vanilla: resuming from checkpoint_last.pt" in m for m in log)
    train_log = open(os.path.join(run_dir, "train.log")).read()
    assert "Loaded checkpoint" in train_log and "@ 4 updates" in train_log
    assert train_log.count("done training") == 2
    assert json.load(open(os.path.join(run_dir, "done.json")))["updates"] == 8


def test_equal_updates_follows_vanilla(toy, shared_out, tmp_path):
    """equal_updates: a later configuration gets the updates vanilla reached in its time cap."""
    import shutil

    configs = reproduce.select_configs(reproduce.CONFIGS, "vanilla,cycle_rev_2L", None)
    tiny = reproduce.load_budget("tiny")
    reproduce.reproduce(toy, shared_out, tiny, configs, skip_decode=True, progress=lambda m: None)
    runs_dir = str(tmp_path / "runs")
    shutil.copytree(os.path.join(shared_out, "runs"), runs_dir,
                    ignore=shutil.ignore_patterns("san*"))
    budget = reproduce.load_budget("tiny", ["max_update=12", "max_minutes=5"])
    budget["equal_updates"] = True
    # pretend vanilla stopped at 8 updates because of its 5-minute cap under these limits
    done_path = os.path.join(runs_dir, "vanilla", "done.json")
    done = json.load(open(done_path))
    done["limits"] = {"max_update": 12, "max_minutes": 5}
    json.dump(done, open(done_path, "w"))
    log = []
    reproduce.reproduce(toy, str(tmp_path / "out"), budget, configs, skip_decode=True,
                        progress=log.append, runs_dir=runs_dir)
    text = "\n".join(log)
    assert "vanilla: already trained (8 updates)" in text
    assert "cycle_rev_2L: max_update 12 -> 8" in text
    assert "cycle_rev_2L: already trained; skipped" in text
    assert "starting" not in text and "resuming" not in text
