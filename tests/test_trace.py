"""The decode trace (fairseq_shared.timing.trace): decoder steps, occupancy and output lengths
of fairseq's beam search, counted on the tiny trained models of test_timing."""

import json

import numpy as np
import pytest

from test_timing import GEN, N_TEST, ckpts, toy  # noqa: F401  (session fixtures)


def _session(toy, path, gen, **kw):
    from fairseq_shared.timing import Session

    session = Session(toy, path, gen, threads=1, **kw)
    return session, session.load("m", path)


def test_forced_length_batches_take_length_plus_one_steps(toy, ckpts):
    """force=L: every output is L tokens + EOS, so each batch does exactly L + 1 decoder
    steps, all sentences alive until the last one, every output at the length limit."""
    _, model = _session(toy, ckpts["vanilla"], GEN, force=6)
    result, outputs = model.run_pass()
    assert len(result.batches) == -(-N_TEST // 16)  # batch size 16
    for b in result.batches:
        assert b.steps == 7 == max(b.out_lengths)
        assert b.rows == [b.sentences * 2] * 7  # beam 2, nobody finishes before the limit
        assert b.max_len == 6 and b.hit_max == b.sentences
    t = result.trace
    assert t["steps"] == 7 * len(result.batches) and t["hit_max"] == N_TEST
    assert t["sentence_steps"] == 7 * N_TEST and t["occupancy"] == 1.0
    assert result.cpu_ms_per_step == pytest.approx(1000 * result.cpu_seconds / t["steps"])
    assert result.cpu_us_per_sentence_step == pytest.approx(
        1e6 * result.cpu_seconds / t["sentence_steps"])


def test_greedy_single_sentence_steps_equal_output_length(toy, ckpts):
    """Beam 1, batch 1: the sentence's only hypothesis is its output, so the search stops
    the step its EOS comes: decoder steps == output tokens (EOS included)."""
    gen = ["--beam", "1", "--batch-size", "1", "--cpu", "--max-len-a", "1", "--max-len-b", "5"]
    session, model = _session(toy, ckpts["cycle_rev_2L"], gen)
    result, outputs = model.run_pass()
    assert len(result.batches) == N_TEST
    src_sizes = session.dataset.src_sizes
    hits = 0
    for b in result.batches:
        assert b.sentences == 1 and b.steps == b.out_lengths[0]
        assert b.rows == [1] * b.steps
    for b, sid in zip(result.batches, [int(i) for i in session._order]):
        assert b.max_len == int(1 * src_sizes[sid] + 5)  # fairseq's max_len_a * src_len + b
        assert b.out_lengths[0] == len(outputs[sid])
        hits += len(outputs[sid]) == b.max_len + 1
    assert result.trace["hit_max"] == hits
    assert result.trace["steps"] == result.tokens and result.trace["tail_steps"] == 0


def test_beam_search_occupancy_and_unchanged_hypotheses(toy, ckpts):
    """Free beam search: the batch runs at least as many steps as its longest output, its
    alive sentences never grow, and tracing does not change a single hypothesis."""
    _, model = _session(toy, ckpts["cycle_rev_2L"], GEN)
    traced, with_trace = model.run_pass(trace=True)
    plain, without = model.run_pass(trace=False)
    assert with_trace == without and plain.trace is None and plain.batches == []
    assert "forward" not in vars(model.models[0].decoder)  # the wrapper is gone after a pass
    for b in traced.batches:
        assert b.steps >= max(b.out_lengths)
        assert all(x >= y for x, y in zip(b.alive, b.alive[1:]))  # occupancy decreases
        assert b.alive[0] == b.sentences and b.alive[-1] >= 1
        assert b.steps <= b.max_len + 1
    t = traced.trace
    assert t["steps"] == sum(b.steps for b in traced.batches)
    assert t["sentence_steps"] == sum(sum(b.alive) for b in traced.batches)
    assert t["row_steps"] == 2 * t["sentence_steps"]  # beam 2
    assert 0 < t["occupancy"] <= 1
    assert t["tail_steps"] == sum(b.steps - max(b.out_lengths) for b in traced.batches)
    assert 0 < t["decoder_cpu_seconds"] <= traced.cpu_seconds + 1e-3


def test_benchmark_reports_steps_and_per_step_cost(toy, ckpts, tmp_path):
    """The benchmark's rows, Markdown, CSV and trace files carry the trace; the scripted
    generator (no Python decoder calls to count) reports none but decodes the same."""
    from fairseq_shared.timing import benchmark, markdown_table, write_report

    report = benchmark(ckpts, toy, GEN, baseline="vanilla", warmup=0, repeats=2, subset=9,
                       threads=1, progress=lambda m: None)
    for m, row in zip(report.models, report.rows()):
        steps = [p.trace["steps"] for p in m.passes]
        assert steps[0] == steps[1] == row["decoder_steps"] > 0  # deterministic search
        assert row["threads"] == 1 and all(p.threads == 1 for p in m.passes)
        assert row["cpu_ms_per_step"] == pytest.approx(
            float(np.median([1000 * p.cpu_seconds / p.trace["steps"] for p in m.passes])))
        assert row["steps_per_sentence"] == pytest.approx(m.passes[0].trace["sentence_steps"] / 9)
        assert row["cpu_speed_vs_baseline_min"] <= row["cpu_speed_vs_baseline"] \
            <= row["cpu_speed_vs_baseline_max"]
        assert len(m.cpu_speed_ratios) == 2
    assert report.settings["threads_per_pass"] == [1]
    table = markdown_table(report)
    assert "CPU ms/step" in table and "decoder steps" in table
    paths = write_report(report, str(tmp_path), trace=True)
    trace = json.loads(open(paths["trace.cycle_rev_2L"]).read())
    assert sum(len(b["out_lengths"]) for b in trace["batches"]) == 9
    assert sum(b["steps"] for b in trace["batches"]) == report.rows()[1]["decoder_steps"]
    assert "decoder_steps" in open(paths["csv"]).readline()

    scripted = benchmark({"v": ckpts["vanilla"]}, toy, GEN, warmup=0, repeats=1, subset=9,
                         threads=1, script=True, progress=lambda m: None)
    assert scripted.rows()[0]["decoder_steps"] is None
    assert scripted.models[0].hypotheses == report.models[0].hypotheses


def test_speed_disagreement_script_separates_the_settings(toy, ckpts, tmp_path):
    """scripts/speed_disagreement.py: the pair under each table's settings, with the trace."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "speed_disagreement.py"
    spec = importlib.util.spec_from_file_location("speed_disagreement", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "sd.md"
    argv = [ckpts["vanilla"], ckpts["cycle_rev_2L"], "--names", "vanilla", "cycle_rev",
            "--data", toy, "--out", str(out), "--sentences", "2", "--repeats", "1",
            "--beam", "2", "--settings", "2"]
    assert mod.main(argv) == 0
    rows = json.loads((tmp_path / "sd.json").read_text())["rows"]
    assert [(r["setting"], r["model"]) for r in rows] == [
        (s, m) for s, *_ in mod.SETTINGS[:2] for m in ("vanilla", "cycle_rev")]
    for r in rows:
        assert r["threads"] == 1 and r["sentences"] == 2
        assert r["decoder_steps"] >= r["output_tokens"] / 2  # at least the longest output
    b1 = [r for r in rows if r["setting"].startswith("export b=1")]
    assert all(r["decoder_steps"] >= r["output_tokens"] for r in b1)  # one sentence a batch
    assert rows[0]["cpu_speed_vs_baseline"] == 1.0
    assert "| main_job (b=64, 1.2x+10) | cycle_rev |" in out.read_text()


def test_decoder_step_profile_splits_the_pass_into_parts_that_nest(toy, ckpts, tmp_path):
    """scripts/decoder_step_profile.py: the wrappers of the encoder, the decoder and its
    sub-layers all fire, the sub-layers fit inside the decoder's time, and the parts add up to
    the pass's CPU time."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "decoder_step_profile.py"
    spec = importlib.util.spec_from_file_location("decoder_step_profile", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "profile.md"
    assert mod.main([ckpts["vanilla"], "--names", "vanilla", "--data", toy, "--batch-sizes",
                     "4", "--out", str(out)]) == 0
    (row,) = json.loads((tmp_path / "profile.json").read_text())["rows"]
    parts = row["parts"]
    assert set(parts) == set(mod.GROUPS) and row["steps"] > 0
    assert all(parts[g] > 0 for g in mod.GROUPS if g != "decoder, rest")
    assert parts["decoder, rest"] >= 0  # the clocked sub-layers ran inside the decoder's time
    assert sum(parts.values()) == pytest.approx(row["cpu_seconds"])
    assert "| vanilla | 4 |" in out.read_text()


def test_batches_are_collated_in_this_process_unless_num_workers_is_given(toy, ckpts):
    """A loader process forked for every pass outlived it (torch's 5 s shutdown wait, twice a
    pass): without --num-workers, no child process; with it, fairseq's loader as asked."""
    import multiprocessing

    session, _ = _session(toy, ckpts["vanilla"], GEN)
    batches = list(session.batches())
    assert batches and multiprocessing.active_children() == []
    asked, _ = _session(toy, ckpts["vanilla"], [*GEN, "--num-workers", "1"])
    itr = asked.batches()
    first = next(itr)
    assert len(multiprocessing.active_children()) == 1  # fairseq's loader, as asked
    assert first["id"].tolist() == batches[0]["id"].tolist()
    itr.close()
