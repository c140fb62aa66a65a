"""``export --hf``'s shared form: tied tensors stored once, SAN, loading in a fresh process with
and without the package (issue 37)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_shared.export.api import export
from fairseq_shared.export.plain import ExportError
from helpers_checkpoint import build_for_data, save_checkpoint
from helpers_data import ENV, data_bin

pytest.importorskip("transformers")
torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parent.parent
PRE_LN = ["--encoder-normalize-before", "--decoder-normalize-before", "--share-all-embeddings",
          "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",  # big enough for the
          "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128"]  # sizes to show
MODELS = {  # untrained: the check compares implementations, not translations
    "cycle_rev": ["--arch", "transformer_cycle_rev", "--encoder-layers", "6",
                  "--decoder-layers", "6", "--encoder-unique-layers", "3",
                  "--decoder-unique-layers", "3"],
    "universal": ["--arch", "transformer_universal", "--encoder-layers", "4",
                  "--decoder-layers", "4"],
    "san": ["--decoder-layers", "6", "--san-self-policy", "1,5", "--san-cross-policy", "2,2,2",
            "--san-encoder-policy", "2,4"],
    "san_context": ["--decoder-layers", "4", "--san-cross-policy", "1,3",
                    "--san-cross-reuse", "context"],
}
SENTENCES = 12


def checkpoint(tmp_path_factory, name, flags, arch="shared_transformer"):
    data = data_bin(tmp_path_factory)
    args, _, model = build_for_data(data, arch, flags)
    path = tmp_path_factory.mktemp(name) / f"{name}.pt"
    return save_checkpoint(str(path), args, model), data


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    out = {}
    for name, flags in MODELS.items():
        path, data = checkpoint(tmp_path_factory, name, PRE_LN + flags)
        target = tmp_path_factory.mktemp(f"{name}_hf")
        out[name] = (path, target, export(path, str(target), hf=True, data=str(data),
                                          sentences=SENTENCES, max_len_b=10))
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_the_shared_form_passes_the_export_check_and_stores_each_tensor_once(exports, name):
    _, out, report = exports[name]
    assert report["ok"], report
    assert report["hf"]["class"] == "FairseqSharedForConditionalGeneration"
    check = report["verify"]["hf_vs_fairseq"]
    assert check["model_agrees"] == SENTENCES and check["max_abs_diff"] < 1e-4
    assert check["search"]["identical"] == SENTENCES  # generate() gives fairseq's hypotheses
    hf = report["hf"]  # within 2% of fairseq's weights (safetensors' header: ~100 bytes a tensor)
    assert hf["safetensors_bytes"] < 1.02 * hf["fairseq_weights_bytes"], hf
    assert hf["ratio_to_unique"] < 1.1, hf
    assert (out / "hf" / "hf_shared_model.py").is_file()  # the remote code ships with it
    if name.startswith("san"):
        assert report["plain_checkpoint"] is None  # no plain fairseq layer computes SAN


def test_the_stock_form_writes_the_copies(exports, tmp_path):
    path, _, shared = exports["cycle_rev"]
    data = json.loads((Path(shared["hf"]["dir"]).parent / "export.json").read_text())["sharing"]
    report = export(path, str(tmp_path / "stock"), hf=True, hf_form="stock", sentences=4,
                    max_len_b=6)
    assert report["ok"] and report["hf"]["class"] == "M2M100ForConditionalGeneration"
    assert report["hf"]["ratio_to_unique"] > 1.5 and data  # 6 layers written for 3 sets
    assert report["lora_merged"] == []  # rigid ties: no delta to merge


def test_a_san_model_has_no_stock_form(exports, tmp_path):
    path, _, _ = exports["san"]
    with pytest.raises(ExportError, match="a SAN model has no stock class"):
        export(path, str(tmp_path / "x"), hf=True, hf_form="stock", sentences=0)
    with pytest.raises(ExportError, match="cannot export a SAN model"):
        export(path, str(tmp_path / "y"), ct2=True, hf=True, sentences=0)


def test_post_ln_and_lora_fall_back_to_the_stock_form_or_are_refused(tmp_path_factory, tmp_path):
    post, data = checkpoint(tmp_path_factory, "post_ln", MODELS["cycle_rev"])
    report = export(post, str(tmp_path / "post"), hf=True, data=str(data), sentences=4,
                    max_len_b=6)
    assert report["ok"] and report["hf"]["class"] == "FSMTForConditionalGeneration"
    assert "post-LN" in report["hf"]["form_note"]
    with pytest.raises(ExportError, match="--hf-form shared: it is post-LN"):
        export(post, str(tmp_path / "post2"), hf=True, hf_form="shared", data=str(data),
               sentences=0)
    lora, _ = checkpoint(tmp_path_factory, "lora", PRE_LN + MODELS["cycle_rev"]
                         + ["--decoder-share-lora-rank", "2"])
    report = export(lora, str(tmp_path / "lora"), hf=True, data=str(data), sentences=0)
    assert report["hf"]["class"] == "M2M100ForConditionalGeneration"
    assert "LoRA-relaxed" in report["hf"]["form_note"]


FRESH = """
import json, sys
how, results = sys.argv[1], []
if how == "remote":
    class Block:  # the package is not importable: the model must come as remote code
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("fairseq_shared", "fairseq"):
                raise ImportError(name + " blocked")
    sys.meta_path.insert(0, Block())
else:
    import fairseq_shared.export.hf_shared_model  # registers the classes
import torch
from transformers import AutoModelForSeq2SeqLM
for model_dir in sys.argv[2:]:
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, trust_remote_code=how == "remote")
    ties = model.all_tied_weights_keys
    layer_ties = {t: s for t, s in ties.items() if ".layers." in t}
    shared = all(model.get_parameter(t) is model.get_parameter(s) for t, s in ties.items())
    follows = None
    for target, source in list(layer_ties.items())[:1]:
        with torch.no_grad():
            model.get_parameter(source).add_(1.0)
        follows = torch.equal(model.get_parameter(target), model.get_parameter(source))
        with torch.no_grad():
            model.get_parameter(source).sub_(1.0)
    ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 1, 1]])
    out = model.generate(input_ids=ids, attention_mask=ids.ne(1).long(), num_beams=2, max_length=9)
    results.append({"module": type(model).__module__, "layer_ties": len(layer_ties),
                    "shared": shared, "follows": follows,
                    "fairseq_shared": "fairseq_shared" in sys.modules, "ids": out.tolist()})
print(json.dumps(results))
"""
FRESH_MODELS = ["cycle_rev", "san"]


def fresh(model_dirs, how):
    env = dict(ENV, PYTHONPATH=str(ROOT) if how == "package" else "")
    result = subprocess.run([sys.executable, "-c", FRESH, how, *map(str, model_dirs)],
                            capture_output=True, text=True, env=env, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fresh_loads(exports):
    """{how: {name: what a fresh process saw}}: one process per way of loading, for all the
    models (each process pays the import of torch and transformers)."""
    dirs = [exports[name][1] / "hf" for name in FRESH_MODELS]
    return {how: dict(zip(FRESH_MODELS, fresh(dirs, how))) for how in ("remote", "package")}


@pytest.mark.parametrize("name", FRESH_MODELS)
def test_a_fresh_process_loads_it_with_or_without_the_package_and_ties_the_layers(fresh_loads,
                                                                                  name):
    remote, package = fresh_loads["remote"][name], fresh_loads["package"][name]
    assert not remote["fairseq_shared"] and remote["module"].startswith("transformers_modules")
    assert package["module"] == "fairseq_shared.export.hf_shared_model"
    for got in (remote, package):  # tied after loading (transformers#41038 ignored a map)
        assert got["shared"] and got["follows"] is (True if name != "san" else None)
        assert (got["layer_ties"] > 0) is (name != "san")  # SAN alone ties no layers
    assert remote["ids"] == package["ids"]


def test_a_weights_file_whose_tied_tensors_differ_is_refused(exports, tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForSeq2SeqLM

    import fairseq_shared.export.hf_shared_model  # noqa: F401  (registers the classes)

    model_dir = tmp_path / "hf"
    shutil.copytree(exports["cycle_rev"][1] / "hf", model_dir)
    weights = load_file(str(model_dir / "model.safetensors"))
    assert "model.decoder.layers.5.fc1.weight" not in weights  # stored once, as layer 0's
    weights["model.decoder.layers.5.fc1.weight"] = weights["model.decoder.layers.0.fc1.weight"] + 1
    save_file(weights, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError) as err:
        AutoModelForSeq2SeqLM.from_pretrained(str(model_dir))
    message = str(err.value)
    assert "model.decoder.layers.5.fc1.weight differs from model.decoder.layers.0.fc1.weight" \
        in message and "\n" not in message


def test_cached_decoding_equals_the_full_pass(exports):
    from fairseq_shared.export.hf_generation import HFEngine

    engine = HFEngine(str(exports["san"][1] / "hf"), pad=1, eos=2)
    model = engine.model
    ids = torch.tensor([[5, 6, 7, 8, 2]])
    target = torch.tensor([[2, 9, 4, 11, 6, 5, 2]])
    with torch.no_grad():
        full = model(input_ids=ids, decoder_input_ids=target, use_cache=False).logits
        encoded = model.get_encoder()(input_ids=ids)
        step, cache = [], None
        for t in range(target.size(1)):
            out = model(encoder_outputs=encoded, decoder_input_ids=target[:, t:t + 1],
                        cache=cache, use_cache=True)
            cache = out.past_key_values
            step.append(out.logits)
    assert (torch.cat(step, dim=1) - full).abs().max() < 1e-5
