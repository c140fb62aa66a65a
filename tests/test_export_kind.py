"""The export decides the kind of model (translation or language model) once, where the
checkpoint is opened, and carries it as :class:`fairseq_shared.checkpoint_io.Kind` (issue 36,
item 5): the rest of ``export/`` reads ``loaded.kind`` and never tests the model, its task or
its configuration again. The source is read with ``ast``; nothing of the export is imported."""

import argparse
import ast
from pathlib import Path

import pytest

from fairseq_shared.checkpoint_io import KINDS, Kind

PACKAGE = Path(__file__).resolve().parents[1] / "fairseq_shared"
#: export/ and the loader it opens checkpoints with (where the kind is decided)
SEARCHED = sorted((PACKAGE / "export").glob("*.py")) + [PACKAGE / "tools" / "checkpoints.py"]
#: functions that decide the kind from a checkpoint or a task name
DECIDERS = {"checkpoint_kind", "task_kind", "is_language_model", "is_lm_checkpoint"}
#: names whose type test says which kind a model or a task is
KIND_TYPES = ("LanguageModel", "LanguageModeling", "EncoderDecoderModel", "TranslationTask")
#: strings whose comparison or attribute probe says which kind a configuration or model is
KIND_STRINGS = {"transformer_lm", "language_modeling", "translation", "encoder"}
MOST = 2  # the "Done when": export/ tests the kind of model in at most two places


def _name(node) -> str:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")


def kind_tests(tree: ast.AST):
    """``(line, what)`` of every test of a model's kind in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in DECIDERS:
                yield node.lineno, f"{name}()"
            elif name == "of" and _name(node.func.value) == "Kind":
                yield node.lineno, "Kind.of()"
            elif name in ("isinstance", "issubclass") and any(
                    t in ast.unparse(node.args[1]) for t in KIND_TYPES):
                yield node.lineno, ast.unparse(node)
            elif name in ("getattr", "hasattr") and len(node.args) > 1 and isinstance(
                    node.args[1], ast.Constant) and node.args[1].value in KIND_STRINGS:
                yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Compare):
            constants = [c.value for c in [node.left, *node.comparators]
                         if isinstance(c, ast.Constant)]
            if any(c in KIND_STRINGS for c in constants):
                yield node.lineno, ast.unparse(node)


def all_kind_tests():
    found = []
    for path in SEARCHED:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{path.relative_to(PACKAGE.parent)}:{line} {what}"
                  for line, what in kind_tests(tree)]
    return found


def test_the_export_tests_the_kind_in_at_most_two_places():
    found = all_kind_tests()
    assert len(found) <= MOST, "the kind is tested at:\n" + "\n".join(found)
    # the one decision, where a checkpoint is opened (issue 54, item 4: the plain dict that
    # CTranslate2's converter is handed carries the kind's behaviour, no second test)
    assert [f.split(":")[0] for f in found] == ["fairseq_shared/tools/checkpoints.py"], found


def kind_reads(tree: ast.AST):
    """``(line, what)`` of every ``if`` (or conditional expression) on a kind's value:
    ``kind is Kind.X``, ``kind == Kind.X``, ``kind is not ...``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Attribute) and _name(c.value) == "Kind"
                for c in [node.left, *node.comparators]):
            yield node.lineno, ast.unparse(node)


ASK_NO_KIND = ["api.py", "plain.py", "ct2.py", "verify.py"]


def test_the_export_asks_no_if_kind():
    """issue 54, item 4: the kinds carry their behaviour (export/kinds.py), so the export's
    modules read it from the kind's type and never branch on which kind they hold."""
    found = [f"{name}:{line} {what}" for name in ASK_NO_KIND
             for line, what in kind_reads(ast.parse((PACKAGE / "export" / name).read_text()))]
    assert found == []
    old = "def f(loaded):\n    return 1 if loaded.kind is Kind.LANGUAGE_MODEL else 2\n"
    assert [line for line, _ in kind_reads(ast.parse(old))] == [2]  # the search is not blind


def test_each_kind_carries_its_behaviour():
    from fairseq.models.transformer import TransformerModel
    from fairseq.models.transformer_lm import TransformerLanguageModel

    from fairseq_shared.export import kinds

    assert set(kinds.EXPORTS) == set(Kind)
    translation, lm = kinds.of(Kind.TRANSLATION), kinds.of(Kind.LANGUAGE_MODEL)
    assert (translation.stock_class, lm.stock_class) == (TransformerModel, TransformerLanguageModel)
    assert kinds.of("language_model") is lm  # a report's value
    task = argparse.Namespace(cfg=argparse.Namespace(source_lang="es", target_lang="en"))
    assert translation.dictionary_names(task) == ["dict.es.txt", "dict.en.txt"]
    assert lm.dictionary_names(task) == ["dict.txt"]
    plain = {"cfg": {"task": {"_name": "translation", "source_lang": "es", "target_lang": "en",
                              "data": "d"}, "model": {"arch": "transformer", "dropout": 0.1}},
             "args": None, "model": {}}
    legacy = translation.legacy_checkpoint(plain)
    assert legacy["cfg"] is None and plain["cfg"] is not None  # a copy
    assert vars(legacy["args"]) == {"arch": "transformer", "dropout": 0.1, "task": "translation",
                                    "source_lang": "es", "target_lang": "en"}
    assert vars(lm.legacy_args(plain))["arch"] == "transformer_lm"
    model = argparse.Namespace(encoder="E", decoder="D")
    assert (translation.source_stack(model), lm.source_stack(model)) == ("E", "D")
    translation.check_hf(ValueError)
    with pytest.raises(ValueError, match="--hf: translation models only"):
        lm.check_hf(ValueError)


def test_the_search_finds_the_old_kind_tests():
    """The search is not blind: each of the tests the export used to make is found."""
    old = '''
def a(model): return isinstance(model, FairseqLanguageModel)
def b(checkpoint): return checkpoint["cfg"]["model"].get("_name") == "transformer_lm"
def c(task): return isinstance(task, LanguageModelingTask)
def d(model): return getattr(model, "encoder", None) or model.decoder
def e(loaded): return lm_lib.is_language_model(loaded.model)
def f(state): return checkpoint_kind(state) == "translation"
def g(loaded): return loaded.kind is Kind.LANGUAGE_MODEL  # reading the kind: not a test
'''
    assert sorted(line for line, _ in kind_tests(ast.parse(old))) == [2, 3, 4, 5, 6, 7, 7]


def _state(task=None, legacy_task=None):
    args = argparse.Namespace(task=legacy_task) if legacy_task else None
    return {"args": args, "cfg": {"task": {"_name": task}} if task else None, "model": {}}


def test_the_kind_is_a_type_decided_from_the_task():
    assert [k.value for k in Kind] == list(KINDS)
    assert Kind.of(_state("translation")) is Kind.TRANSLATION
    assert Kind.of(_state(legacy_task="translation_multi_simple_epoch")) is Kind.TRANSLATION
    assert Kind.of(_state("language_modeling")) is Kind.LANGUAGE_MODEL
    assert Kind.of(_state("audio_pretraining")) is None  # another task's: the tool decides
    assert Kind.of(_state()) is None
    assert Kind.LANGUAGE_MODEL.described == "language model"
    assert Kind.TRANSLATION == "translation"  # a str: JSON reports write it as such
    with pytest.raises(ValueError):
        Kind("speech")


def test_the_opened_checkpoint_carries_its_kind(tmp_path, tmp_path_factory, monkeypatch):
    """An opened checkpoint carries its kind; the export refuses one of another task (here:
    one whose kind is made unknown), naming the file, the task and the kinds it takes."""
    from fairseq_shared.export.plain import ExportError, load_shared
    from helpers_data import data_bin
    from test_export import save_random_checkpoint

    data = data_bin(tmp_path_factory)
    path = save_random_checkpoint(tmp_path / "random.pt", data, [])
    assert load_shared(str(path), str(data)).kind is Kind.TRANSLATION
    monkeypatch.setattr(Kind, "of", classmethod(lambda cls, state: None))
    with pytest.raises(ExportError) as error:
        load_shared(str(path), str(data))
    assert str(error.value) == (
        f"{path}: task 'translation' is neither a translation nor a language modeling task; "
        "the export takes translation and language model checkpoints")
