"""The LM experiment: the corpus builder on a tiny fake Bible corpus, the n-gram baselines on
fairseq's tokens, one LM run end to end (5 updates; its test perplexity recomputed from the
checkpoint), and the table rendered from the written files."""

import json
import math
import os

import pytest

from fairseq_shared.data import bible_lm
from fairseq_shared.experiments import lm_evidence, lm_report, queue
from fairseq_shared.experiments.lm_baselines import load_split, write_baselines
from helpers_data import FAKE_BIBLE_SIZES, make_fake_bible


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    bible = make_fake_bible(tmp_path_factory.mktemp("bible"))
    out = tmp_path_factory.mktemp("bible_lm")
    stats = bible_lm.build(bible, out)
    return bible, out, stats


def test_corpus_keeps_the_split_and_tokenizes_with_the_corpus_spm(corpus):
    import sentencepiece as spm
    from fairseq.data import Dictionary, data_utils

    bible, out, stats = corpus
    sp = spm.SentencePieceProcessor(model_file=str(bible / "spm.model"))
    for split, n in FAKE_BIBLE_SIZES.items():
        raw = (bible / "raw" / f"{split}.en").read_text().splitlines()
        tok = (out / "tok" / f"{split}.en").read_text().splitlines()
        assert tok == [" ".join(sp.encode(l, out_type=str)) for l in raw]
        s = stats["splits"][split]
        assert s["lines"] == n and s["scored_tokens"] == s["pieces"] + n
        assert s["pieces"] == sum(len(t.split()) for t in tok)
    # the English train pieces are the dictionary; held-out pieces outside it are <unk>
    train_types = {p for l in (out / "tok" / "train.en").read_text().splitlines() for p in l.split()}
    assert stats["dictionary"]["pieces"] == len(train_types)
    test_oov = stats["splits"]["test"]["oov_types"]
    assert test_oov and not set(test_oov) & train_types and stats["splits"]["train"]["oov_tokens"] == 0
    d = Dictionary.load(str(out / "bin" / "dict.txt"))
    ds = data_utils.load_indexed_dataset(str(out / "bin" / "test"), d)
    first = ds[0].tolist()
    assert first[-1] == d.eos() and first.count(d.unk()) == sum(test_oov.values())
    assert d.string(ds[1]) == (out / "tok" / "test.en").read_text().splitlines()[1]
    assert stats["audit"]["decontamination"]["near_duplicates_removed"] == 1
    assert stats["audit"]["splits"]["test"]["near_duplicate_share_chrf70"] == 0.0
    assert "| test | 23 |" in (out / "README.md").read_text()
    # restartable: a second build redoes nothing and gives the same stats
    mtime = (out / "bin" / "train.bin").stat().st_mtime
    assert bible_lm.build(bible, out) == stats
    assert (out / "bin" / "train.bin").stat().st_mtime == mtime


def test_corpus_refuses_a_split_that_is_not_the_held_out_books(tmp_path):
    bible = make_fake_bible(tmp_path / "bible")
    ids = bible / "raw" / "valid.ids"
    ids.write_text(ids.read_text().replace("Acts 1:3", "Gen 1:3"))
    with pytest.raises(ValueError, match=r"valid.ids: books \['Gen'\] do not belong to the valid"):
        bible_lm.build(bible, tmp_path / "lm")
    from fairseq_shared.cli import bible_lm as command

    assert command.main(["--bible", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2


def test_baselines_score_fairseqs_tokens(corpus, tmp_path):
    _, out, stats = corpus
    path = write_baselines(str(out / "bin"), str(tmp_path), progress=lambda m: None)
    res = json.loads(path.read_text())
    test, sym = load_split(str(out / "bin"), "test")
    for name in ("unigram", "kn5"):
        t = res["models"][name]["test"]
        assert t["tokens"] == stats["splits"]["test"]["scored_tokens"] == sum(len(v) + 1 for v in test)
        assert t["oov_tokens"] == stats["splits"]["test"]["oov_tokens"]
        assert t["perplexity"] == pytest.approx(2 ** t["loss_base2"])
    # V: the English training pieces, </s> and <unk>
    assert res["models"]["unigram"]["vocab"] == stats["dictionary"]["pieces"] + 2 == len(sym["vocab"])


@pytest.fixture(scope="module")
def finished(corpus, tmp_path_factory):
    _, out, _ = corpus
    root = tmp_path_factory.mktemp("lm_runs")
    work, results = str(root / "work"), str(root / "results")
    lm_evidence.snapshot_corpus(str(out), results)
    log = []
    done = queue.work_pairs(lm_evidence.SUITE, [("vanilla_L3", 1), ("cycle_rev_6_3", 1)],
                            str(out), work, results, "tiny", progress=log.append)
    return out, work, results, done


def _perplexity_from_checkpoint(checkpoint, bin_dir, split):
    """Bits per token of every verse's pieces and </s>, the first piece predicted from </s>."""
    import torch
    from fairseq import checkpoint_utils
    from fairseq.data import Dictionary, data_utils

    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([checkpoint])
    model = models[0].eval()
    d = Dictionary.load(os.path.join(bin_dir, "dict.txt"))
    ds = data_utils.load_indexed_dataset(os.path.join(bin_dir, split), d)
    nll, n = 0.0, 0
    with torch.no_grad():
        for i in range(len(ds)):
            target = ds[i].long()
            source = torch.cat([target.new([d.eos()]), target[:-1]]).unsqueeze(0)
            lprobs = model.get_normalized_probs(model(source), log_probs=True)[0]
            nll -= lprobs.gather(1, target.unsqueeze(1)).sum().item()
            n += len(target)
    return nll / n / math.log(2), n


def test_run_writes_its_file_with_the_eval_lm_perplexity(finished):
    out, work, results, done = finished
    assert done == ["vanilla_L3_s1", "cycle_rev_6_3_s1"]
    r = json.loads((queue.result_path(results, "vanilla_L3", 1)).read_text())
    assert r["updates"] == 5 and r["N"] == 3 and r["arch"] == "transformer_lm"
    assert r["params"] > 0 and r["budget"]["seed"] == 1
    assert r["curve"] and r["curve"][-1]["update"] == 5
    assert r["curve"][-1]["valid_ppl"] == pytest.approx(2 ** r["valid_loss"], rel=1e-3)
    assert r["train_command"][0] == "fairseq-train" and "--sample-break-mode" in r["train_command"]
    assert r["eval_command"][0] == "fairseq-eval-lm" and "--gen-subset" in r["eval_command"]
    # fairseq-eval-lm's number is every test token's log-probability, </s> included
    ckpt = os.path.join(work, "runs_s1", "vanilla_L3", "checkpoint_last.pt")
    bits, n = _perplexity_from_checkpoint(ckpt, str(out / "bin"), "test")
    assert r["test"]["tokens"] == n
    assert r["test"]["loss_base2"] == pytest.approx(bits, abs=1e-4)
    assert r["test"]["perplexity"] == pytest.approx(r["test"]["perplexity_printed"], abs=0.01)
    # the shared row: 6 layers over vanilla 3's parameter sets, scored the same way
    c = json.loads((queue.result_path(results, "cycle_rev_6_3", 1)).read_text())
    assert (c["N"], c["M"], c["params"]) == (6, 3, r["params"])
    assert c["train_command"][c["train_command"].index("--decoder-share-strategy") + 1] == "cycle_rev"
    ckpt = os.path.join(work, "runs_s1", "cycle_rev_6_3", "checkpoint_last.pt")
    assert c["test"]["loss_base2"] == pytest.approx(
        _perplexity_from_checkpoint(ckpt, str(out / "bin"), "test")[0], abs=1e-4)
    # a second worker finds nothing left to do
    assert queue.work_pairs(lm_evidence.SUITE, [("vanilla_L3", 1)], str(out), work, results,
                            "tiny", progress=lambda m: None) == []


def test_render_from_the_written_files(finished, corpus):
    out, _, results, _ = finished
    write_baselines(str(out / "bin"), results, progress=lambda m: None)
    r1 = json.loads(queue.result_path(results, "vanilla_L3", 1).read_text())
    # a second seed, as a worker would write it, for the spread
    r2 = dict(r1, seed=2, test=dict(r1["test"], perplexity=r1["test"]["perplexity"] + 2.0))
    queue.result_path(results, "vanilla_L3", 2).write_text(json.dumps(r2))
    paths = lm_report.render(results)
    text = open(paths["tables"]).read()
    p1 = r1["test"]["perplexity"]
    row = next(l for l in text.splitlines() if l.startswith("| Vanilla, 3 layers"))
    # mean ± sd [95% t interval over the two seeds: half-width t(1) * sd / sqrt(2)] (per seed)
    from fairseq_shared.experiments.statistics import t_quantile

    half = t_quantile(1)
    assert (f"| {p1 + 1:.2f} ± {math.sqrt(2):.2f} [{p1 + 1 - half:.2f}, {p1 + 1 + half:.2f}] "
            f"({p1:.2f}, {p1 + 2:.2f}) |") in row
    assert f"| {r1['params']:,} | 2 | 5 |" in row
    base = json.loads((open(os.path.join(results, "baselines.json")).read()))
    kn5 = base["models"]["kn5"]["test"]["perplexity"]
    assert f"| {kn5:.2f} | - |" in next(l for l in text.splitlines() if "Kneser-Ney" in l)
    assert "| Sequence, 6 layers / 3 sets | 6 | 3 | all | not run yet |" in text
    assert "| Cycle (rev), 6 layers / 3 sets | 6 | 3 | cycle_rev/all |" in text
    assert f"test (John) 23 / {corpus[2]['splits']['test']['scored_tokens']}" in text
    assert os.path.getsize(paths["plot"]) > 10000


def test_queue_budget_and_eval_output_parsing():
    def parse_queue(text):
        return queue.parse_queue(text, lm_evidence.QUEUE, lm_evidence.LM_CONFIGS)

    assert parse_queue("attn_6:2,vanilla_L6:1") == [("attn_6", 2), ("vanilla_L6", 1)]
    assert parse_queue(None) == lm_evidence.QUEUE
    with pytest.raises(SystemExit, match="unknown configuration 'attn'; known: vanilla_L3"):
        parse_queue("attn:1")
    with pytest.raises(SystemExit, match="needs a seed"):
        parse_queue("attn_6")
    with pytest.raises(SystemExit, match="--budget: unknown 'big'; allowed: lm, tiny"):
        lm_evidence.load_lm_budget("big")
    with pytest.raises(SystemExit, match="the longest verse has 114 tokens"):
        lm_evidence.check_budget_fits({"train": {"longest": 114}},
                                      lm_evidence.load_lm_budget("lm", ["tokens_per_sample=100"]))
    rates = [{"name": "vanilla_L3", "cpu_s_per_update": 1.0},
             {"name": "vanilla_L6", "cpu_s_per_update": 2.0}]
    assert lm_evidence.estimate_minutes([("vanilla_L3", 1), ("attn_6", 2)], 60, rates) == 3.0
    text = ("2026 | INFO | fairseq_cli.eval_lm | Evaluated 25,501 tokens in 3.1s (8226.13 tokens/s)\n"
            "2026 | INFO | fairseq_cli.eval_lm | Loss (base 2): 5.5727, Perplexity: 47.59\n")
    res = lm_evidence.parse_eval_output(text)
    assert res["tokens"] == 25501 and res["perplexity"] == pytest.approx(2 ** 5.5727)
    assert lm_evidence.parse_eval_output("Traceback ...") is None
