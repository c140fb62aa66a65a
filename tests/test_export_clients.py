"""The export as the clients a user reaches for read it (issue 57, "Clients"): every command and
snippet of docs/export.md's "Export and use it" runs as written, with ``CHECKPOINT``, ``DIR``
and ``DATA_BIN`` filled in (the export's own check cut to 3 sentences of at most 10 tokens, as
tests/test_quickstart.py cuts it); CTranslate2 takes every type ``--quantization`` offers; the
shared Hugging Face form loads through ``AutoModel`` too, checks the sha256 values its
``export.json`` records, and names a ``config.json`` that does not fit its layers.

The model is untrained (these are checks of the clients, not of translations) on the toy
corpus, which has the Bible corpus's layout (Spanish to English, ``spm.model`` beside
``bin/``)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_checkpoint import build_for_data, save_checkpoint
from helpers_data import ENV, shared_toy_corpus

pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "export.md"
SECTION = "## Export and use it"
PRE_LN = ["--encoder-normalize-before", "--decoder-normalize-before", "--share-all-embeddings",
          "--arch", "transformer_cycle_rev", "--encoder-layers", "4", "--decoder-layers", "4",
          "--encoder-unique-layers", "2", "--decoder-unique-layers", "2"]
#: runs a snippet with neither fairseq nor the package importable: the shared form must come
#: as the export's remote code
NO_PACKAGE = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fairseq_shared", "fairseq"):
            raise ImportError(name + " blocked")
sys.meta_path.insert(0, Block())
"""


def snippets():
    """``[(language, code)]`` of the code blocks of the docs' section, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(SECTION + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(bash|python)\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """The toy corpus, an untrained pre-LN cycle_rev 4+4 over 2 sets, and the docs' export of
    it: ``(paths to fill in, the export's process)``."""
    corpus = Path(shared_toy_corpus(tmp_path_factory))
    args, _, model = build_for_data(str(corpus / "bin"), "shared_transformer", PRE_LN)
    work = tmp_path_factory.mktemp("clients")
    checkpoint = save_checkpoint(str(work / "model.pt"), args, model)
    fill = {"CHECKPOINT": checkpoint, "DIR": str(work / "export"), "DATA_BIN": str(corpus / "bin")}
    (language, export), *_ = snippets()
    assert language == "bash" and export.startswith("python -m fairseq_shared.cli.export ")
    result = run("bash", export.replace("--hf\n", "--hf --sentences 3 --max-len-b 10\n"), fill,
                 work)
    return fill, work, result


def run(language, code, fill, cwd, package=True):
    for name, value in fill.items():
        code = code.replace(name, value)
    env = dict(ENV, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               OMP_NUM_THREADS="1")
    if language == "python":
        argv = [sys.executable, "-c", code if package else NO_PACKAGE + code]
    else:
        argv = ["bash", "-c", code.replace("python ", f"{sys.executable} ", 1)
                if code.startswith("python ") else code]
    if not package:
        env["PYTHONPATH"] = ""
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{code}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def test_the_docs_export_command_writes_every_client_its_model(client):
    fill, _, result = client
    assert result.stdout.strip().endswith("export OK")
    out = Path(fill["DIR"])
    report = json.loads((out / "export.json").read_text())
    assert report["ok"] and report["hf"]["form"] == "shared"
    assert set(report["verify"]) >= {"fairseq_plain_vs_shared", "ct2_float32_vs_fairseq",
                                     "ct2_int8_float16_vs_fairseq", "hf_vs_fairseq"}
    assert report["verify"]["ct2_int8_float16_vs_fairseq"]["required"] is False  # quantized
    assert (out / "ct2_int8_float16" / "model.bin").is_file() and (out / "spm.model").is_file()
    config = json.loads((out / "hf" / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    # issue 57, silent 8: the directory came 0700 (mkdtemp), model.safetensors 0600
    umask = os.umask(0)
    os.umask(umask)
    modes = {str(p.relative_to(out)): p.stat().st_mode & 0o777 for p in [out, *out.rglob("*")]}
    assert modes["hf/model.safetensors"] == 0o666 & ~umask
    assert modes == {p: (0o777 if (out / p).is_dir() else 0o666) & ~umask for p in modes}


def test_every_snippet_of_the_docs_runs_as_written(client):
    """fairseq-generate and fairseq-interactive (stock fairseq, no plug-in), CTranslate2, and
    Hugging Face: the snippets that need only transformers run with neither fairseq nor the
    package importable (the remote code), the one that imports the package with it."""
    fill, work, _ = client
    (_, export), *uses = snippets()
    assert [language for language, _ in uses] == ["bash", "python", "python", "python", "python"]
    outputs = []
    for language, code in uses:
        package = "fairseq_shared" in code or language == "bash" or "ctranslate2" in code
        outputs.append(run(language, code, fill, work, package=package).stdout)
    fairseq, ct2, hf, auto, limited = outputs
    assert len(re.findall(r"^H-\d+\t", fairseq, re.M)) == 23 + 1  # the test set, then the echo
    assert re.search(r"^S-0\t▁", fairseq, re.M)  # interactive: sentencepiece pieces, not <unk>
    assert ct2.strip()
    assert hf.startswith("['") and limited.startswith("['")
    assert auto.strip() == "FairseqSharedForConditionalGeneration"


def test_ctranslate2_takes_every_quantization_the_export_offers(client, tmp_path):
    """issue 57, Deliver 2: ``ct2-fairseq-converter`` cannot read the plain checkpoint (stock
    fairseq's weights-only loading refuses the Namespace it would need), so the export writes
    every type CTranslate2's converter writes; each loads and translates."""
    import ctranslate2
    import torch
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    from fairseq_shared.checkpoint_io import Kind
    from fairseq_shared.export import ct2 as ct2_lib
    from fairseq_shared.export import kinds

    assert set(ct2_lib.QUANTIZATIONS) | {"float32"} == set(ACCEPTED_MODEL_TYPES)
    fill, _, _ = client
    out = Path(fill["DIR"])
    plain = torch.load(out / "checkpoint.pt", weights_only=True)
    legacy = kinds.of(Kind.TRANSLATION).legacy_checkpoint(plain)
    source = ["▁U", "n", "o"]
    for q in ct2_lib.QUANTIZATIONS:
        model_dir = ct2_lib.convert(legacy, str(out), str(tmp_path / q), q)
        translator = ctranslate2.Translator(model_dir, device="cpu")
        hypothesis = translator.translate_batch([source], beam_size=2, max_decoding_length=5,
                                                max_input_length=0)[0].hypotheses[0]
        assert 1 <= len(hypothesis) <= 5, q
    # stated in docs/export.md: CTranslate2's own converter cannot read it (a plain dict where
    # it reads attributes of a Namespace)
    converter = os.path.join(os.path.dirname(sys.executable), "ct2-fairseq-converter")
    result = subprocess.run([converter, "--model_path", str(out / "checkpoint.pt"),
                             "--data_dir", str(out), "--output_dir", str(tmp_path / "own")],
                            capture_output=True, text=True, env=ENV)
    assert result.returncode != 0
    assert "AttributeError: 'dict' object has no attribute 'data'" in result.stderr


def test_the_shared_form_checks_the_recorded_sha256_and_its_config(client, tmp_path):
    """issue 57, silent 5 and a traceback: a corrupted hf/model.safetensors loaded and
    translated without a word; a tampered hf/config.json gave IndexError."""
    fill, _, _ = client
    out = tmp_path / "export"
    shutil.copytree(fill["DIR"], out)
    load = ("from transformers import AutoModelForSeq2SeqLM\n"
            f"AutoModelForSeq2SeqLM.from_pretrained({str(out / 'hf')!r}, trust_remote_code=True)")

    def fails(expected):
        result = subprocess.run([sys.executable, "-c", NO_PACKAGE + load], capture_output=True,
                                text=True, env=dict(ENV, PYTHONPATH=""), cwd="/", timeout=300)
        assert result.returncode != 0
        assert result.stderr.strip().splitlines()[-1] == expected

    weights = out / "hf" / "model.safetensors"
    original = weights.read_bytes()
    corrupt = bytearray(original)
    corrupt[-5] ^= 0xFF  # a weight's byte: safetensors itself notices nothing
    weights.write_bytes(bytes(corrupt))
    fails(f"ValueError: {weights}: its sha256 is not the one {out / 'export.json'} records (the "
          "file changed after the export wrote it); export again")
    from fairseq_shared.export.hf_generation import HFEngine

    with pytest.raises(ValueError, match="model.safetensors: its sha256 is not the one"):
        HFEngine(str(out / "hf"), pad=1, eos=2)  # the package's engine (timing), either form
    weights.write_bytes(original)
    config_path = out / "hf" / "config.json"
    config = json.loads(config_path.read_text())
    config["layer_sets"]["decoder"] = [0, 1]
    config_path.write_text(json.dumps(config))
    import fairseq_shared.export.hf_shared_model  # noqa: F401  (registers: the same class)
    from transformers import AutoModelForSeq2SeqLM

    with pytest.raises(ValueError) as error:
        AutoModelForSeq2SeqLM.from_pretrained(str(out / "hf"))
    assert str(error.value) == (f"{config_path}: its sha256 is not the one "
                                f"{out / 'export.json'} records (the file changed after the "
                                "export wrote it); export again")
    (out / "export.json").unlink()  # hf/ copied out of its export: the config is still checked
    with pytest.raises(ValueError) as error:
        AutoModelForSeq2SeqLM.from_pretrained(str(out / "hf"))
    assert str(error.value) == ("config.json: layer_sets.decoder must list the set of each of "
                                "the 4 decoder layers; it is [0, 1]")
