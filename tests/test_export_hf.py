"""``export --hf``: a stock transformers class, tokenizer and generation settings that translate
raw text to fairseq's hypotheses (issue 23, item 2)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_shared.export.api import export
from fairseq_shared.export.plain import ExportError
from helpers_data import ENV, TINY_ARCH, TINY_TRAIN, data_bin, run_tool, trained_checkpoints

pytest.importorskip("transformers")
torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parent.parent
PRE_LN = ["--encoder-normalize-before", "--decoder-normalize-before"]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The sentencepiece toy corpus and a pre-LN cycle_rev 4+4 over 2 sets, 100 updates, in the
    stock form (the shared one: test_hf_shared.py). At 30 updates it never ended a sentence,
    and every check here decoded 200 tokens a sentence (a minute in all); at 100 its
    hypotheses end by themselves, for 5 s more of training."""
    from helpers_data import shared_toy_corpus

    corpus = Path(shared_toy_corpus(tmp_path_factory))  # only read
    save_dir = tmp_path_factory.mktemp("pre_ln")
    run_tool("fairseq-train", corpus / "bin", *TINY_ARCH, *TINY_TRAIN, *PRE_LN,
             "--max-update", "100", "--seed", "1", "--save-dir", save_dir,
             "--no-epoch-checkpoints", "--no-save-optimizer-state")
    out = tmp_path_factory.mktemp("hf_export")
    report = export(str(save_dir / "checkpoint_last.pt"), str(out), hf=True, hf_form="stock",
                    sentences=23)
    return corpus, save_dir / "checkpoint_last.pt", out, report


def test_pre_ln_cycle_rev_exports_to_m2m100_and_passes_the_check(toy):
    _, _, out, report = toy
    assert report["ok"] and report["hf"]["class"] == "M2M100ForConditionalGeneration"
    check = report["verify"]["hf_vs_fairseq"]
    assert check["model_agrees"] == 23 and check["max_abs_diff"] < 1e-4
    assert check["search"]["identical"] == 23  # beam 4, with the length-limit processor
    # tied layers written as copies: 4 layers of weights for 2 parameter sets per stack
    assert 1.5 < report["hf"]["ratio_to_unique"] < 2.5
    generation = json.loads((out / "hf" / "generation_config.json").read_text())
    assert {k: generation[k] for k in ("num_beams", "early_stopping", "min_length",
                                       "max_length", "suppress_tokens",
                                       "decoder_start_token_id")} == {
        "num_beams": 4, "early_stopping": True, "min_length": 2, "max_length": 202,
        "suppress_tokens": [1], "decoder_start_token_id": 2}


def test_a_beam_1_export_passes_the_check_with_greedy_search(toy, tmp_path):
    """Issue 55's deployment protocol decodes at beam 1: HF's greedy search returns no sequence
    scores, so the check scores its hypotheses with the model's own log-probs, as fairseq."""
    _, checkpoint, _, _ = toy
    report = export(str(checkpoint), str(tmp_path), hf=True, hf_form="stock", sentences=12,
                    beam=1)
    check = report["verify"]["hf_vs_fairseq"]
    assert report["ok"] and check["search"]["identical"] == 12, check
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert generation["num_beams"] == 1 and not generation.get("early_stopping")


def test_a_beam_1_generation_config_is_one_transformers_saves(tmp_path):
    from fairseq.data import Dictionary

    from fairseq_shared.export.hf_generation import generation_config

    greedy = generation_config(Dictionary(), beam=1)
    greedy.save_pretrained(tmp_path)  # validates: early stopping needs beams
    saved = json.loads((tmp_path / "generation_config.json").read_text())
    assert saved["num_beams"] == 1 and not saved.get("early_stopping")
    assert generation_config(Dictionary(), beam=4).early_stopping is True


FRESH = """
import json, sys
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from fairseq_shared.export.hf_generation import FairseqLengthLimit
directory, texts = sys.argv[1], json.loads(sys.stdin.read())
tok = AutoTokenizer.from_pretrained(directory)
model = AutoModelForSeq2SeqLM.from_pretrained(directory)
batch = tok(texts, return_tensors="pt", padding=True)
limit = FairseqLengthLimit(model.generation_config.max_length, tok.eos_token_id)
out = model.generate(**batch, logits_processor=[limit])
print(json.dumps({"source_ids": [tok(t)["input_ids"] for t in texts], "ids": out.tolist(),
                  "text": tok.batch_decode(out, skip_special_tokens=True)}))
"""


def _fairseq_translations(checkpoint, corpus, texts):
    """fairseq's beam-4 hypotheses of raw ``texts`` through the project's pipeline."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_shared.export.hf_tokenizer import pipeline_ids
    from fairseq_shared.export.plain import load_shared

    loaded = load_shared(str(checkpoint))
    src, tgt = loaded.task.source_dictionary, loaded.task.target_dictionary
    generator = SequenceGenerator([loaded.model], tgt, beam_size=4, max_len_b=200)
    spm = str(corpus / "spm.model")
    sources, hyps = [], []
    for text in texts:
        ids = torch.tensor(pipeline_ids(text, src, spm))
        sources.append(ids.tolist())
        sample = {"net_input": {"src_tokens": ids[None], "src_lengths": torch.tensor([len(ids)])}}
        with torch.no_grad():
            best = generator.forward(sample)[0][0]["tokens"].tolist()
        hyps.append(best)
    strings = [tgt.string(torch.tensor(h), "sentencepiece") for h in hyps]
    return sources, hyps, strings


def test_reloaded_in_a_fresh_python_it_translates_raw_text_as_fairseq(toy):
    corpus, checkpoint, out, _ = toy
    texts = (corpus / "raw" / "test.es").read_text(encoding="utf-8").splitlines()[:12]
    texts.append("  Uno   dos tres.  ")  # sentencepiece's whitespace normalisation
    env = dict(ENV, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", FRESH, str(out / "hf")], input=json.dumps(texts),
                            capture_output=True, text=True, env=env, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr[-3000:]
    hf = json.loads(result.stdout.strip().splitlines()[-1])
    sources, hyps, strings = _fairseq_translations(checkpoint, corpus, texts)
    assert hf["source_ids"] == sources  # the tokenizer gives the pipeline's ids
    got = [[t for t in row[1:] if t != 1] for row in hf["ids"]]  # start token, padding dropped
    assert got == hyps
    # fairseq's sentencepiece decoding strips the ends; HF's Metaspace decoder drops only the
    # first space, so a hypothesis that starts with bare "▁" pieces keeps the others
    assert [t.strip() for t in hf["text"]] == strings


def test_post_ln_exports_to_fsmt_and_passes_the_check(tmp_path, tmp_path_factory):
    checkpoint = trained_checkpoints(tmp_path_factory) / "checkpoint_last.pt"
    report = export(str(checkpoint), str(tmp_path), hf=True, sentences=12,
                    data=str(data_bin(tmp_path_factory)), max_len_b=6)
    assert report["hf"]["class"] == "FSMTForConditionalGeneration"
    check = report["verify"]["hf_vs_fairseq"]
    assert report["ok"] and check["model_agrees"] == 12, check
    assert check["search"]["identical"] == 12, check  # hypotheses cut at the limit of 6 too


def test_a_deep_shared_encoder_under_one_decoder_layer_exports_to_hf(tmp_path, tmp_path_factory):
    """issue 35: 12 encoder layers over 6 sets by cycle_rev, 1 decoder layer, pre-LN."""
    from test_export import DEEP_SHARED_ENCODER, save_random_checkpoint

    data = data_bin(tmp_path_factory)
    path = save_random_checkpoint(tmp_path / "deep.pt", data,
                                  [*DEEP_SHARED_ENCODER, *PRE_LN, "--share-all-embeddings"])
    report = export(str(path), str(tmp_path / "out"), hf=True, hf_form="stock", data=str(data),
                    sentences=6, max_len_b=9)
    assert report["ok"] and report["hf"]["class"] == "M2M100ForConditionalGeneration"
    check = report["verify"]["hf_vs_fairseq"]
    assert check["model_agrees"] == 6 and check["max_abs_diff"] < 1e-4, check


def test_a_corrupted_hf_export_fails_and_names_the_sentence(toy, tmp_path):
    from safetensors.torch import load_file, save_file

    from fairseq_shared.export.verify import verify_translation
    from fairseq_shared.export.plain import load_shared

    corpus, checkpoint, out, _ = toy
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    for f in (out / "hf").iterdir():
        if f.is_file():
            (hf_dir / f.name).write_bytes(f.read_bytes())
    weights = load_file(str(hf_dir / "model.safetensors"))
    weights["model.decoder.layers.3.fc2.bias"][5] += 0.5  # layer 3: the copy of layer 0
    save_file(weights, str(hf_dir / "model.safetensors"), metadata={"format": "pt"})
    loaded = load_shared(str(checkpoint))
    task = loaded.task
    task.load_dataset("test")
    settings = dict(beam=4, lenpen=1.0, max_len_a=0.0, max_len_b=200)
    result = verify_translation(loaded.model, loaded.model, task, task.dataset("test"),
                                list(range(8)), settings, {}, hf_dir=str(hf_dir))["hf_vs_fairseq"]
    assert not result["ok"] and result["model_differs"]
    assert result["model_differs"][0]["source"]


def test_models_no_stock_class_computes_are_refused_with_the_reason(tmp_path, tmp_path_factory):
    from test_export import save_random_checkpoint

    data = data_bin(tmp_path_factory)
    cases = {
        "san": (["--decoder-layers", "4", "--san-self-policy", "2,2"],
                "a SAN model exports only to the shared form"),
        "no_final_norm": ([*PRE_LN, "--share-all-embeddings", "--no-decoder-final-norm"],
                          "--no-decoder-final-norm"),
        "separate_embeddings": (PRE_LN, "needs one joined vocabulary and --share-all-embeddings"),
        "mixed": (["--encoder-normalize-before"], "pre-LN on one side and post-LN on the other"),
        "layernorm_embedding": (["--layernorm-embedding"], "--layernorm-embedding"),
    }
    for name, (flags, reason) in cases.items():
        path = save_random_checkpoint(tmp_path / f"{name}.pt", data, flags)
        with pytest.raises(ExportError) as err:
            export(str(path), str(tmp_path / name), hf=True, data=str(data), sentences=0)
        assert reason in str(err.value), (name, str(err.value))
        assert not os.path.exists(tmp_path / name / "hf")  # refused before writing


def test_transformers_is_imported_only_by_the_hf_path():
    code = ("import sys, fairseq_shared, fairseq_shared.export.api, fairseq_shared.cli.export; "
            "print('transformers' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(ENV, PYTHONPATH=str(ROOT)), timeout=120)
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr[-2000:]
