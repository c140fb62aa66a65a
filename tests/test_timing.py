"""fairseq_shared.timing and the time_generate CLI on a tiny synthetic corpus and tiny models.

The two checkpoints come from the main job's training stage with the ``tiny`` budget (vanilla
2+2 and cycle_rev 4+4 over 2 sets, 8 updates each); the run directory is shared with
test_main_job and test_trace across the xdist workers (helpers_data.shared_main_job), so
whichever runs first trains.
"""

import json
import os
import subprocess

import pytest
import sacrebleu

from fairseq_shared.data.toydata import SIZES
from helpers_data import generate_in_process, shared_main_job, shared_toy_corpus

GEN = ["--beam", "2", "--batch-size", "16", "--cpu", "--max-len-a", "1", "--max-len-b", "5"]
N_TEST = SIZES["test"]


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    return shared_toy_corpus(tmp_path_factory)


@pytest.fixture(scope="session")
def ckpts(toy, tmp_path_factory):
    return shared_main_job(tmp_path_factory, toy)[1]


def raw_refs(toy, split="test"):
    with open(os.path.join(toy, "raw", f"{split}.en"), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def test_benchmark_counts_scores_and_interleaving(toy, ckpts):
    from fairseq_shared.timing import benchmark

    log = []
    report = benchmark(ckpts, toy, GEN, baseline="vanilla", warmup=1, warmup_batches=1,
                       repeats=2, threads=1, progress=log.append)
    refs = raw_refs(toy)
    assert report.references == refs  # raw detokenized references, all of them, in id order
    assert report.settings["references"].endswith(os.path.join("raw", "test.en"))
    assert report.settings["sentences_decoded"] == N_TEST
    assert report.settings["required_batch_size_multiple"] == 1
    assert report.settings["beam"] == 2 and report.settings["torch_threads"] == 1
    for m in report.models:
        assert len(m.passes) == 2
        assert all(p.sentences == N_TEST for p in m.passes)
        assert all(p.tokens == sum(m.hyp_lengths) for p in m.passes)
        assert all(p.gen_seconds > 0 and p.peak_mem_mb > 0 for p in m.passes)
        assert len(m.hypotheses) == N_TEST and m.deterministic
        # BLEU/chrF are sacreBLEU's on the same hypotheses against the raw references
        assert m.bleu == pytest.approx(sacrebleu.corpus_bleu(m.hypotheses, [refs]).score)
        assert m.chrf == pytest.approx(sacrebleu.corpus_chrf(m.hypotheses, [refs]).score)
        assert "version:2.6" in m.bleu_signature and "nc:6" in m.chrf_signature
    assert report.models[0].speed_ratio == pytest.approx(1.0)
    # interleaved: round 2 starts with the other model
    order = [l.split(": ")[0].split()[-1] for l in log if l.startswith("[decode] pass")]
    assert order == ["vanilla", "cycle_rev_2L", "cycle_rev_2L", "vanilla"], log
    rows = report.rows()
    assert rows[1]["params"] == rows[0]["params"]  # cycle_rev N=2M: same unique params


def test_same_hypotheses_as_fairseq_generate(toy, ckpts):
    """The decode is fairseq-generate's: its D- lines equal our hypotheses."""
    from fairseq_shared.fairseq_commands import USER_DIR
    from fairseq_shared.timing import benchmark

    report = benchmark({"v": ckpts["vanilla"]}, toy, GEN, warmup=0, repeats=1, threads=1,
                       progress=lambda m: None)
    out = generate_in_process(os.path.join(toy, "bin"), "--user-dir", USER_DIR,
                              "--path", ckpts["vanilla"], "--bpe", "sentencepiece",
                              "--sentencepiece-model", os.path.join(toy, "spm.model"),
                              "--required-batch-size-multiple", "1", *GEN)
    theirs = {}
    for line in out.splitlines():
        if line.startswith("D-"):
            sid, _, text = line[2:].split("\t", 2)
            theirs[int(sid)] = text
    assert len(theirs) == N_TEST
    assert [theirs[i] for i in range(N_TEST)] == report.models[0].hypotheses


def test_scripted_generator_decodes_the_same_hypotheses(toy, ckpts):
    """--script: fairseq's SequenceGenerator under torch.jit.script, behind the same passes."""
    from fairseq_shared.timing import benchmark

    runs = {}
    for script in (False, True):
        report = benchmark(ckpts, toy, GEN, warmup=0, repeats=1, threads=1, script=script,
                           progress=lambda m: None)
        runs[script] = report
    assert runs[True].settings["generator"].startswith("torch.jit.script")
    assert runs[False].settings["generator"] == "eager"
    for eager, scripted in zip(runs[False].models, runs[True].models):
        assert scripted.hypotheses == eager.hypotheses and scripted.bleu == eager.bleu
    with pytest.raises(ValueError, match="--script: only fairseq's SequenceGenerator"):
        benchmark({"v": ckpts["vanilla"]}, toy, GEN + ["--print-alignment"], warmup=0, repeats=1,
                  script=True, progress=lambda m: None)


def test_dropped_sentences_fail_loudly(toy, ckpts):
    from fairseq_shared.timing import DroppedSentencesError, benchmark, check_counts

    # fairseq silently skips over-long inputs with --skip-invalid-size-inputs-valid-test
    with pytest.raises(DroppedSentencesError, match="missing ids"):
        benchmark({"v": ckpts["vanilla"]}, toy,
                  GEN + ["--max-source-positions", "12", "--skip-invalid-size-inputs-valid-test"],
                  warmup=0, repeats=1, threads=1, progress=lambda m: None)
    check_counts([0, 1, 2], {0: [2], 1: [2], 2: [2]})
    with pytest.raises(DroppedSentencesError):
        check_counts([0, 1, 2], {0: [2], 2: [2]})
    with pytest.raises(DroppedSentencesError, match="duplicated"):
        check_counts([0, 1], {0: [2], 1: [2]}, duplicates=[1])


def test_forced_lengths(toy, ckpts):
    from fairseq_shared.timing import benchmark_forced_lengths, select_ids

    ids = select_ids(N_TEST, 10)
    assert len(ids) == 10 and ids[0] == 0 and ids[-1] == N_TEST - 1
    report = benchmark_forced_lengths(ckpts, toy, GEN, force="reference", subset=10,
                                      warmup=0, repeats=1, threads=1, progress=lambda m: None)
    refs = raw_refs(toy)
    lengths = [m.hyp_lengths for m in report.models]
    assert lengths[0] == lengths[1]  # both models decode to identical lengths
    for m in report.models:
        assert m.passes[0].sentences == 10
        assert m.hypotheses == [refs[i] for i in ids]  # forced to the reference
        assert m.bleu == pytest.approx(100.0)
    # reference length in target tokens (incl. EOS) from the binarized test set
    from fairseq.data import Dictionary, data_utils as du

    ds = du.load_indexed_dataset(os.path.join(toy, "bin", "test.es-en.en"),
                                 Dictionary.load(os.path.join(toy, "bin", "dict.en.txt")))
    assert lengths[0] == [int(ds.sizes[i]) for i in ids]

    fixed = benchmark_forced_lengths({"v": ckpts["vanilla"]}, toy, GEN, force=6, warmup=0,
                                     repeats=1, threads=1, progress=lambda m: None)
    assert fixed.models[0].hyp_lengths == [7] * N_TEST  # 6 tokens + EOS each
    with pytest.raises(ValueError):
        benchmark_forced_lengths({"v": ckpts["vanilla"]}, toy, GEN, force=None)


def test_cli_writes_md_csv_json(toy, ckpts, tmp_path, capsys):
    from fairseq_shared.cli import time_generate

    out = tmp_path / "dec"
    rc = time_generate.main([toy, "-c", f"vanilla={ckpts['vanilla']}",
                             "-c", f"shared={ckpts['cycle_rev_2L']}", "--baseline", "vanilla",
                             "--warmup", "0", "--repeats", "1", "--threads", "1",
                             "--sentences", "7", "--out", str(out), "--", *GEN])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| vanilla |" in printed and "| shared |" in printed and "BLEU signature" in printed
    data = json.loads((out / "results.json").read_text())
    assert [r["model"] for r in data["results"]] == ["vanilla", "shared"]
    assert all(r["sentences"] == 7 for r in data["results"])
    assert data["settings"]["subset"].startswith("7 of 23")
    csv_lines = (out / "results.csv").read_text().strip().splitlines()
    assert len(csv_lines) == 3 and csv_lines[0].startswith("model,checkpoint,params")
    assert len((out / "hyp.shared.txt").read_text().splitlines()) == 7
    # dropped sentences -> exit status 3
    rc = time_generate.main([toy, "-c", ckpts["vanilla"], "--warmup", "0", "--repeats", "1",
                             *GEN, "--max-source-positions", "12",
                             "--skip-invalid-size-inputs-valid-test"])
    assert rc == 3


def test_a_path_that_is_not_utf8_is_reported_escaped(toy, ckpts, tmp_path, capsys):
    """issue 38, item 4: results.md raised UnicodeEncodeError for a checkpoint under a
    directory named with a Latin-1 byte; every report shows the byte as \\xff."""
    import shutil

    from fairseq_shared.cli import time_generate

    models = tmp_path / os.fsdecode(b"models\xff")
    models.mkdir()
    checkpoint = shutil.copy(ckpts["vanilla"], models / "checkpoint.pt")
    out = tmp_path / os.fsdecode(b"dec\xff")
    # unnamed: the model is named for its directory, so the byte is in every report's rows
    assert time_generate.main([toy, "-c", str(checkpoint), "--warmup", "0", "--repeats", "1",
                               "--threads", "1", "--sentences", "3", "--out", str(out),
                               "--", *GEN]) == 0
    assert "wrote" in capsys.readouterr().err
    for name in ("results.md", "results.csv"):
        assert "models\\xff" in (out / name).read_text(encoding="utf-8"), name
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert data["results"][0]["checkpoint"].endswith("models\\xff/checkpoint.pt")
    assert data["results"][0]["model"] == "models\\xff"


def test_cpu_time_per_pass_and_summary(toy, ckpts, tmp_path):
    """Every pass also records the process's CPU time around the same inference_step calls;
    the summary, ratios, CSV, JSON and Markdown carry the CPU rates."""
    import statistics

    from fairseq_shared.timing import CSV_FIELDS, PassResult, markdown_table, write_report
    from fairseq_shared.timing import benchmark

    report = benchmark(ckpts, toy, GEN, baseline="vanilla", warmup=0, repeats=2, subset=8,
                       threads=1, progress=lambda m: None)
    assert "process_time" in report.settings["cpu_timer"]
    for m, row in zip(report.models, report.rows()):
        for p in m.passes:
            assert p.cpu_seconds > 0
            # one torch thread: CPU time cannot exceed the wall time on every core
            assert p.cpu_seconds <= p.gen_seconds * (os.cpu_count() or 1) + 1e-3
            assert p.cpu_tokens_per_s == pytest.approx(p.tokens / p.cpu_seconds)
            assert p.cpu_sentences_per_s == pytest.approx(p.sentences / p.cpu_seconds)
            assert p.sentences == 8
        cpu_tps = [p.cpu_tokens_per_s for p in m.passes]
        cpu_sps = [p.cpu_sentences_per_s for p in m.passes]
        assert row["cpu_tokens_per_s_median"] == pytest.approx(statistics.median(cpu_tps))
        assert row["cpu_tokens_per_s_min"] == pytest.approx(min(cpu_tps))
        assert row["cpu_tokens_per_s_max"] == pytest.approx(max(cpu_tps))
        assert row["cpu_sentences_per_s_median"] == pytest.approx(statistics.median(cpu_sps))
        assert row["cpu_sentences_per_s_min"] <= row["cpu_sentences_per_s_median"] \
            <= row["cpu_sentences_per_s_max"]
        cpu_med = statistics.median([p.cpu_seconds for p in m.passes])
        assert row["cpu_seconds_median"] == pytest.approx(cpu_med)
        assert row["cpu_ms_per_token"] == pytest.approx(1000 * cpu_med / row["output_tokens"])
        # the wall-clock fields are unchanged
        assert row["tokens_per_s_median"] == pytest.approx(
            statistics.median([p.tokens_per_s for p in m.passes]))
    base, other = report.models
    assert base.cpu_speed_ratio == pytest.approx(1.0)
    assert base.cpu_sent_speed_ratio == pytest.approx(1.0)
    assert other.cpu_speed_ratio == pytest.approx(statistics.median(
        p.cpu_tokens_per_s / b.cpu_tokens_per_s for p, b in zip(other.passes, base.passes)))
    assert report.rows()[1]["cpu_speed_vs_baseline"] == other.cpu_speed_ratio
    assert "CPU tok/s" in markdown_table(report)
    paths = write_report(report, str(tmp_path / "rep"))
    data = json.loads(open(paths["json"]).read())
    assert all(p["cpu_seconds"] > 0 for ps in data["passes"].values() for p in ps)
    assert {"cpu_tokens_per_s_median", "cpu_speed_vs_baseline"} <= set(CSV_FIELDS)
    assert "cpu_tokens_per_s_median" in open(paths["csv"]).readline()
    # records built the old way (six fields) still work, without CPU rates
    old = PassResult(1.0, 1.2, 4, 20, 10.0, 1.0)
    assert old.tokens_per_s == 20 and old.cpu_tokens_per_s != old.cpu_tokens_per_s  # NaN


def test_bench_san_cpu_script(toy, ckpts, tmp_path):
    """The archived results/archive/san/bench_san_cpu.py decodes through fairseq_shared.timing:
    every cell has positive CPU rates, forced cells have the forced length, and --render prints
    the table."""
    import importlib.util
    import sys

    script = os.path.join(os.path.dirname(__file__), os.pardir, "results", "archive", "san",
                          "bench_san_cpu.py")
    spec = importlib.util.spec_from_file_location("bench_san_cpu", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "cpu.json"
    bench.main(["--data", os.path.join(toy, "bin"),
                "--models", f"vanilla={ckpts['vanilla']},shared={ckpts['cycle_rev_2L']}",
                "--sentences", "4", "--large-batch", "4", "--rounds", "1", "--forced-len", "6",
                "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["command"].startswith("python results/archive/san/bench_san_cpu.py --data")
    cells = doc["cells"]
    assert [(c["forced_len"], c["beam"], c["batch"]) for c in cells] == [
        (f, b, n) for f in (None, 6) for b in (1, 4) for n in (1, 4)]
    for c in cells:
        assert c["sentences"] == 4 and c["rounds"] == 1
        assert f"--beam {c['beam']} --batch-size {c['batch']}" in c["generate_args"]
        assert "--num-workers 0" in c["generate_args"]
        assert list(c["models"]) == ["vanilla", "shared"]
        for name, m in c["models"].items():
            assert m["sentences"] == 4 and m["tokens"] > 0
            assert len(m["cpu_tok_s"]) == len(m["cpu_sent_s"]) == len(m["wall_tok_s"]) == 1
            assert all(x > 0 for x in m["cpu_tok_s"] + m["cpu_sent_s"] + m["wall_tok_s"])
            assert m["cpu_tok_s"][0] == pytest.approx(m["tokens"] / m["cpu_seconds"][0])
            assert m["cpu_ratio"] > 0 and m["cpu_sent_ratio"] > 0 and m["wall_ratio"] > 0
            if c["forced_len"]:
                assert m["tokens"] == 4 * (6 + 1)  # 6 tokens + EOS each
        assert c["models"]["vanilla"]["cpu_ratio"] == pytest.approx(1.0)
    md = (tmp_path / "cpu.md").read_text()
    rendered = subprocess.run([sys.executable, script, "--render", str(out)], check=True,
                              capture_output=True, text=True).stdout
    assert rendered == md
    assert "| decoding | beam | batch | model |" in rendered
    assert "| forced 6 | 4 | 4 | shared | 28 |" in rendered
    assert len([l for l in rendered.splitlines() if l.startswith("| free")]) == 8
