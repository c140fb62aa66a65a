"""The frontier tool end to end (issue 19, item 3) on the tiny trained vanilla and cycle_rev
models of test_timing, and a SAN model that cannot be exported."""

import json
import os
import statistics

import pytest

from test_timing import ckpts, toy  # noqa: F401  (session fixtures)

SENTENCES = 4


@pytest.fixture(scope="module")
def san_checkpoint(toy, tmp_path_factory):
    from helpers_checkpoint import build_for_data, save_checkpoint

    args, _, model = build_for_data(os.path.join(toy, "bin"), "shared_transformer", [
        "--decoder-layers", "4", "--san-self-policy", "1,3", "--san-cross-policy", "2,2"])
    return save_checkpoint(str(tmp_path_factory.mktemp("san") / "san.pt"), args, model)


@pytest.fixture(scope="module")
def frontier_run(toy, ckpts, san_checkpoint, tmp_path_factory):
    from harness import frontier

    out = tmp_path_factory.mktemp("frontier")
    common = ["--data", toy, "--out", str(out / "results"), "--work", str(out / "work"),
              "--batch-sizes", "1,3", "--beam", "2", "--max-len-a", "1", "--max-len-b", "5",
              "--warmup", "1", "--warmup-batches", "1", "--repeats", "2",
              "--sentences", str(SENTENCES),
              "--verify-sentences", "3"]
    argv = ["--checkpoints", f"vanilla={ckpts['vanilla']},cycle_rev={ckpts['cycle_rev_2L']}",
            *common]
    assert frontier.main(argv) == 0
    # SAN without TorchScript (its compilation is the slow part of this test)
    assert frontier.main(["--checkpoints", f"san={san_checkpoint}", *common,
                          "--engines", "fairseq,ct2_float32,ct2_int8,hf"]) == 0
    return out / "results", argv


def _record(out, name):
    return json.loads((out / "models" / f"{name}.json").read_text())


def test_every_engine_of_an_exportable_model(frontier_run):
    out, _ = frontier_run
    for name in ("vanilla", "cycle_rev"):
        rec = _record(out, name)
        assert rec["settings"]["threads"] == 1 and rec["sentences"] == SENTENCES
        engines = rec["engines"]
        assert set(engines) == {"fairseq", "torchscript", "ct2_float32", "ct2_int8", "hf"}
        for engine, e in engines.items():
            assert set(e["batch"]) == {"1", "3"}, (name, engine)
            for bs, c in e["batch"].items():
                assert c["sentences"] == SENTENCES and len(c["cpu_seconds"]) == 2
                assert c["threads"] == [1, 1] or engine.startswith("ct2")
                assert c["cpu_tokens_per_s"] == pytest.approx(
                    c["tokens"] / statistics.median(c["cpu_seconds"]))
                hyps = (out / c["hypotheses_file"]).read_text().splitlines()
                assert len(hyps) == SENTENCES
        # exactness: TorchScript, CTranslate2 float32 and Hugging Face give fairseq's hypotheses
        for engine in ("torchscript", "ct2_float32", "hf"):
            for bs, c in engines[engine]["batch"].items():
                assert c["exact_claimed"] and c["exact_ok"], (name, engine, bs, c)
                assert c["identical"] == c["compared"] == SENTENCES
                assert c["bleu"] == engines["fairseq"]["batch"][bs]["bleu"]
                # the same hypotheses: one file in the tree, which both cells name
                assert c["hypotheses_file"] == engines["fairseq"]["batch"][bs]["hypotheses_file"]
        texts = [p.read_text() for p in (out / "hyp").glob(f"{name}.*")]
        assert len(texts) == len(set(texts)) == len({c["hypotheses_file"] for e in engines.values()
                                                     for c in e["batch"].values()})
        assert engines["ct2_int8"]["batch"]["1"]["exact_claimed"] is False
        # the decode trace: fairseq's steps; TorchScript's are the same search
        for bs in ("1", "3"):
            f, t = engines["fairseq"]["batch"][bs], engines["torchscript"]["batch"][bs]
            assert f["steps"] >= 1 and t["steps"] == f["steps"]
            assert f["cpu_ms_per_step"] == pytest.approx(
                1000 * statistics.median(f["cpu_seconds"]) / f["steps"])
            assert engines["ct2_float32"]["batch"][bs]["steps"] is None
        # batch 1: one sentence per batch, so at least one step per output token
        f1 = engines["fairseq"]["batch"]["1"]
        assert f1["steps"] >= f1["tokens"] and f1["occupancy"] == 1.0
        # sizes: the int8 file is smaller than float32; fairseq's weights once each
        assert engines["ct2_int8"]["disk_bytes"] < engines["ct2_float32"]["disk_bytes"]
        assert engines["fairseq"]["disk_bytes"] == engines["torchscript"]["disk_bytes"]
    # cycle_rev ties its weights: its file is about vanilla's (same unique parameters)
    v, c = _record(out, "vanilla"), _record(out, "cycle_rev")
    assert v["params"] == c["params"]
    assert c["engines"]["fairseq"]["disk_bytes"] < 1.1 * v["engines"]["fairseq"]["disk_bytes"]


def test_san_is_recorded_as_not_exportable_with_the_reason(frontier_run):
    out, _ = frontier_run
    rec = _record(out, "san")
    assert rec["export"]["exportable"] is False
    for engine in ("ct2_float32", "ct2_int8"):
        e = rec["engines"][engine]
        assert e["available"] is False and e["batch"] == {}
        assert "cannot export a SAN model" in e["reason"]
    assert set(rec["engines"]["fairseq"]["batch"]) == {"1", "3"}
    assert rec["engines"]["torchscript"]["reason"] == "not asked for (--engines)"
    # this post-LN SAN model has no Hugging Face form either (the shared form is pre-LN)
    assert "a SAN model exports only to the shared form" in rec["engines"]["hf"]["reason"]
    text = (out / "frontier.md").read_text()
    assert "san ct2_float32: not exportable: cannot export a SAN model" in text


def test_table_plots_and_pick_come_from_the_records(frontier_run):
    from harness import frontier
    from harness.frontier_report import (by_configuration, disk_mb,
                                                            load_records, options, pick)

    out, argv = frontier_run
    rows = options(load_records(str(out)))
    choice = json.loads((out / "pick.json").read_text())
    best = max(r["bleu"] for r in rows)
    assert choice["best_bleu"]["bleu"] == best
    near = [r for r in rows if r["bleu"] >= best - 0.5]
    fastest = max(near, key=lambda r: r["batch"]["3"]["cpu_tokens_per_s"])
    assert choice["fastest"]["3"]["option"] == f"{fastest['model']} / {fastest['engine']}"
    smallest = min(near, key=lambda r: r["disk_bytes"])
    assert choice["smallest"]["disk_bytes"] == smallest["disk_bytes"]
    int8 = {r["model"]: r["disk_bytes"] / 1e6 for r in rows if r["engine"] == "ct2_int8"}
    assert disk_mb(by_configuration(rows)) == int8 and "san" not in int8  # SAN: no export
    for png in ("frontier_bleu_vs_speed.png", "frontier_bleu_vs_mb.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    table = (out / "frontier.md").read_text()
    assert "| cycle_rev | ct2_int8 |" in table and "Which to pick" in table
    san = next(l for l in table.splitlines() if l.startswith("| san | "))
    assert " / - | " in san  # no CT2 file, no CT2 speed: SAN does not export
    assert "1 warm-up (the longest 1 batches) + 2 timed passes" in table
    # the pick on hand-made options: 0.5 BLEU tolerance
    made = [{"model": m, "engine": "fairseq", "bleu": b, "disk_bytes": d,
             "batch": {"1": {"cpu_tokens_per_s": t}}}
            for m, b, t, d in (("a", 20.0, 100, 9e6), ("b", 19.6, 300, 3e6), ("c", 19.4, 900, 1e6))]
    p = pick(made)
    assert p["best_bleu"]["option"] == "a / fairseq"
    assert p["fastest"]["1"]["option"] == "b / fairseq"  # c is 0.6 below the best
    assert p["smallest"]["option"] == "b / fairseq"
    # with the budget's statistics: every option of a configuration not resolved below the
    # best counts as good as the best, whatever its mean
    p = pick(made, best_set=["a", "c"])
    assert p["rule"] == "configurations not resolved below the best over seeds"
    assert p["as_good"] == ["a / fairseq", "c / fairseq"]
    assert p["fastest"]["1"]["option"] == "c / fairseq" and p["smallest"]["option"] == "c / fairseq"
    # seeds of one configuration (<configuration>_s<seed>) are picked by their mean
    from harness.frontier_report import by_configuration

    seeded = [{"model": m, "engine": "fairseq", "bleu": b, "disk_bytes": 4e6, "boot": "x",
               "batch": {"1": {"cpu_tokens_per_s": t}}}
              for m, b, t in (("a_s1", 20.0, 100), ("a_s2", 19.0, 300), ("b_s1", 19.8, 150))]
    grouped = {r["model"]: r for r in by_configuration(seeded)}
    assert set(grouped) == {"a", "b"} and grouped["a"]["bleu_seeds"] == [20.0, 19.0]
    assert grouped["a"]["bleu"] == 19.5 and grouped["a"]["batch"]["1"]["cpu_tokens_per_s"] == 200
    p = pick(list(grouped.values()))
    assert p["best_bleu"] == {"option": "b / fairseq", "bleu": 19.8, "bleu_seeds": [19.8]}
    assert p["fastest"]["1"]["option"] == "a / fairseq"  # a's mean, not its lucky seed
    from harness.frontier_report import short_table

    recs = [{"model": m, "params": 1000, "settings": {"batch_sizes": [1]}}
            for m in ("a_s1", "a_s2", "b_s1")]
    lines = short_table(recs, seeded, anchor="a_s1")
    assert lines[2:] == ["| a | 2 | 1,000 | 19.50 [20.00, 19.00] | 4.00 / - | 1.00 / - / - / - |",
                         "| b | 1 | 1,000 | 19.80 | 4.00 / - | 0.75 / - / - / - |"]
    # a configuration named as the anchor (the default `--anchor vanilla` when the models are
    # vanilla_s1, ...) anchors the per-model table at its first seed, not at nothing
    from harness.frontier_report import anchor_model, markdown

    assert anchor_model(seeded, "a") == "a_s1" and anchor_model(seeded, "a_s2") == "a_s2"
    for r, rec in zip(seeded, recs):
        r["batch"]["1"]["bleu_signature"] = "sig"
        r["chrf"], rec["engines"], rec["settings"] = 40.0, {}, {**rec["settings"], "subset": "test", "beam": 4,
                                            "lenpen": 1.0, "max_len_a": 1.2, "max_len_b": 10,
                                            "threads": 1, "warmup": 1, "repeats": 2}
    assert markdown(recs, seeded, None, "a") == markdown(recs, seeded, None, "a_s1")
    assert "| b_s1 | fairseq | 19.80 | 40.00 | 4.00 | 150.0 (-) | x1.50 |" in markdown(
        recs, seeded, None, "a")
    seeded[1]["boot"] = "y"  # one configuration's seeds timed in two boots: no speed ranking
    assert "fastest_refused" in pick(by_configuration(seeded))
    mixed = {r["model"]: r for r in by_configuration(seeded)}  # and no mean speed to plot
    assert mixed["a"]["batch"]["1"]["cpu_tokens_per_s"] is None
    assert mixed["b"]["batch"]["1"]["cpu_tokens_per_s"] == 150
    # re-running skips recorded models; --render-only rewrites the table from the records
    (out / "frontier.md").unlink()
    assert frontier.main(argv) == 0 and (out / "frontier.md").exists()
    assert frontier.main(["--out", str(out), "--render-only"]) == 0
    assert (out / "frontier.md").read_text() == table


def test_speeds_are_compared_only_within_one_machine_boot(frontier_run, tmp_path):
    import shutil

    from harness import frontier_report
    from fairseq_shared.timing import machine

    out, _ = frontier_run
    table = (out / "frontier.md").read_text()
    here = machine.describe()
    assert f"Measured on one machine boot: {here['host']}, {here['cpu_model']}" in table
    v, c = _record(out, "vanilla"), _record(out, "cycle_rev")
    assert v["machine"] == c["machine"] == here
    row = next(l for l in table.splitlines() if l.startswith("| cycle_rev | fairseq |"))
    ratio = (c["engines"]["fairseq"]["batch"]["1"]["cpu_tokens_per_s"]
             / v["engines"]["fairseq"]["batch"]["1"]["cpu_tokens_per_s"])
    assert f"| x{ratio:.2f} |" in row
    assert "| x1.00 |" in next(l for l in table.splitlines() if l.startswith("| vanilla | fairseq |"))
    # the short table: one row per configuration, every engine's ratio at each batch size
    short = next(l for l in table.splitlines() if l.startswith(f"| cycle_rev | 1 | {c['params']:,} |"))
    ts = (c["engines"]["torchscript"]["batch"]["1"]["cpu_tokens_per_s"]
          / v["engines"]["fairseq"]["batch"]["1"]["cpu_tokens_per_s"])
    assert f"| {ratio:.2f} / {ts:.2f} / " in short
    assert next(l for l in table.splitlines() if l.startswith("| vanilla | ")).count("| 1.00 / ") == 2  # each batch size
    # a record of another boot (another session's machine): no ratio, no "fastest"
    other = tmp_path / "results"
    shutil.copytree(out, other)
    c["machine"] = dict(here, boot_id="another-boot-0000")
    (other / "models" / "cycle_rev.json").write_text(json.dumps(c))
    frontier_report.render(str(other))
    mixed = (other / "frontier.md").read_text()
    assert "**Measured in 2 machine boots**" in mixed and "boot another" in mixed
    row = next(l for l in mixed.splitlines() if l.startswith("| cycle_rev | fairseq |"))
    assert "| x" not in row
    short = next(l for l in mixed.splitlines() if l.startswith(f"| cycle_rev | 1 | {c['params']:,} |"))
    assert short.endswith("| - / - / - / - | - / - / - / - |")
    made = [{"model": m, "engine": "fairseq", "bleu": 20.0, "disk_bytes": 1e6, "boot": boot,
             "batch": {"1": {"cpu_tokens_per_s": t}}} for m, t, boot in (("a", 100, "x"),
                                                                         ("b", 300, "y"))]
    choice = frontier_report.pick(made)
    assert choice["fastest"] == {} and "more than one machine boot" in choice["fastest_refused"]
    assert frontier_report.pick(made[:1])["fastest"]["1"]["option"] == "a / fairseq"


def test_bad_checkpoint_lists_fail_with_one_line(tmp_path, capsys):
    from harness import frontier

    for spec, msg in (("vanilla", "is not NAME=PATH"), (f"a={tmp_path}/x.pt", "no such file")):
        assert frontier.main(["--checkpoints", spec, "--data", str(tmp_path),
                              "--out", str(tmp_path / "o")]) == 2
        assert msg in capsys.readouterr().err
    assert frontier.main(["--checkpoints", f"a={__file__}", "--data", str(tmp_path),
                          "--out", str(tmp_path / "o"), "--warmup-batches", "0"]) == 2
    assert "--warmup-batches 0: allowed an integer >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        frontier.main(["--out", str(tmp_path), "--engines", "ct2_float32"])
    assert "fairseq always included" in capsys.readouterr().err


@pytest.fixture
def budget_frontier():
    """``scripts/budget_frontier.py`` as a module."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "scripts"))
    import budget_frontier as module

    return module


def test_the_budget_frontier_splits_its_models_evenly_with_the_anchor_first(budget_frontier,
                                                                            tmp_path):
    layers = {"vanilla_s1": 6, "vanilla_s2": 6, "cycle_rev_2L_s1": 12, "vanilla_2L_s1": 12,
              "vanilla_2L_dec1_s1": 7, "san_dec2L_s1": 9, "one_wide_ffn_s1": 6}
    shares = budget_frontier.split(layers, "vanilla_s1", 2)
    assert shares[0][0] == "vanilla_s1" and sorted(sum(shares, [])) == sorted(layers)
    loads = [sum(layers[n] for n in share) for share in shares]
    assert abs(loads[0] - loads[1]) <= max(layers.values())
    assert budget_frontier.split({"a": 1}, "vanilla_s1", 2) == [["a"]]
    # the models and their costs come from the committed files: a model without its run
    # record (a run still training) is left out
    (tmp_path / "models").mkdir()
    (tmp_path / "runs").mkdir()
    for name in ("vanilla_s1", "cycle_rev_2L_s1"):
        (tmp_path / "models" / f"{name}.pt").write_bytes(b"")
    (tmp_path / "runs" / "vanilla_s1.json").write_text(json.dumps({"N": 3, "decoder_N": 3}))
    assert budget_frontier.costs(tmp_path) == {"vanilla_s1": 6}
    cmd = budget_frontier.commands([["vanilla_s1"]], "work/bible", tmp_path)[0]
    assert cmd[cmd.index("--anchor") + 1] == "vanilla_s1" and "--commit" in cmd
    assert cmd[cmd.index("--threads") + 1] == "1"


def test_the_budget_frontier_refuses_another_build_of_the_corpus(budget_frontier, toy,  # noqa: F811
                                                                  tmp_path, capsys):
    from harness.corpus import snapshot_corpus

    results = tmp_path / "results"
    (results / "models").mkdir(parents=True)
    (results / "runs").mkdir()
    (results / "models" / "vanilla_s1.pt").write_bytes(b"")
    (results / "runs" / "vanilla_s1.json").write_text(json.dumps({"N": 3, "decoder_N": 3}))
    snapshot_corpus(toy, str(results))
    assert budget_frontier.main(["--data", toy, "--results", str(results), "--dry-run"]) == 0
    assert "--checkpoints vanilla_s1=" in capsys.readouterr().out
    (results / "corpus" / "source.dict.txt").write_text("▁a 5\n")
    with pytest.raises(SystemExit, match=r"dict\.es\.txt differs from .*source\.dict\.txt"):
        budget_frontier.main(["--data", toy, "--results", str(results), "--dry-run"])


def test_a_resumed_frontier_measures_again_what_another_boot_recorded(frontier_run, tmp_path):
    import shutil

    from harness import frontier
    from fairseq_shared.timing import machine

    out, argv = frontier_run
    copy = tmp_path / "results"
    shutil.copytree(out, copy)
    argv = [str(copy) if a == str(out) else a for a in argv]
    v = _record(copy, "vanilla")
    v["machine"] = dict(v["machine"], boot_id="another-boot-0000")
    (copy / "models" / "vanilla.json").write_text(json.dumps(v))
    before = (copy / "models" / "cycle_rev.json").read_text()
    assert frontier.main(argv) == 0
    assert _record(copy, "vanilla")["machine"] == machine.describe()  # measured again
    assert (copy / "models" / "cycle_rev.json").read_text() == before  # this boot's: skipped
    assert "machine boots" not in (copy / "frontier.md").read_text().split("## By")[0]

