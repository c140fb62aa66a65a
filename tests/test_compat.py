"""Safe (weights_only) loading of real fairseq checkpoints; malicious pickles are refused."""

import argparse
import os
import pickle

import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_shared import compat
from fairseq_shared.checkpoint_io import CheckpointError
from helpers_data import USER_DIR, data_bin, run_tool, trained_checkpoints


class Payload:
    """Unpickling this runs a shell command that creates ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class PythonPayload:
    """Unpickling this calls ``builtins.exec`` to create ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return trained_checkpoints(tmp_path_factory)


def globals_beyond_torch_defaults(path):
    """What ``weights_only`` would refuse in ``path`` if nothing had been allowlisted."""
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        return set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    finally:
        torch.serialization.add_safe_globals(saved)


def allowed_names():
    names = set()
    for entry in compat.fairseq_checkpoint_safe_globals():
        if isinstance(entry, tuple):
            names.add(entry[1])
        else:
            names.add(f"{entry.__module__}.{entry.__qualname__}")
    return names


def test_allowlist_is_exactly_what_fairseq_checkpoints_need(ckpt_dir):
    assert allowed_names() == {
        "argparse.Namespace",
        "numpy.ndarray",
        "numpy.dtype",
        "numpy.dtypes.Int64DType",
        "numpy._core.multiarray._reconstruct",
        "numpy.core.multiarray._reconstruct",  # the same function, as numpy 1.x names it
    }
    # The real checkpoint needs them (so the test means something), and needs nothing else.
    needed = globals_beyond_torch_defaults(ckpt_dir / "checkpoint_last.pt")
    assert {"argparse.Namespace", "numpy.ndarray"} <= needed
    assert needed <= allowed_names()
    # registered process-wide by importing fairseq_shared
    registered = {f"{g.__module__}.{g.__qualname__}" for g in torch.serialization.get_safe_globals()
                  if not isinstance(g, tuple)}
    assert {"argparse.Namespace", "numpy.ndarray"} <= registered


def test_real_checkpoint_loads_safely(ckpt_dir):
    path = ckpt_dir / "checkpoint_last.pt"
    plain = torch.load(path)  # default weights_only=True on torch >= 2.6
    explicit = torch.load(path, weights_only=True)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))

    assert isinstance(plain["cfg"]["model"], argparse.Namespace)
    assert plain["cfg"]["model"].arch == "transformer_cycle_rev"
    assert plain["extra_state"]["metrics"]["valid"]  # carries numpy BLEU counts
    assert plain["model"].keys() == explicit["model"].keys() == state["model"].keys()
    for name, tensor in plain["model"].items():
        assert torch.equal(tensor, state["model"][name])
    # tied tensors are stored once: the alias of decoder layer 3 (set 1 = layer 0) is absent
    assert "decoder.layers.0.fc1.weight" in state["model"]
    assert "decoder.layers.3.fc1.weight" not in state["model"]

    # and fairseq rebuilds the tied model from it
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    model = models[0]
    assert model.decoder.layers[3].fc1.weight is model.decoder.layers[0].fc1.weight
    assert torch.equal(model.decoder.layers[0].fc1.weight, state["model"]["decoder.layers.0.fc1.weight"])


def _malicious_checkpoints(tmp_path, ckpt_dir, payload_cls):
    marker = tmp_path / "PWNED"
    real = torch.load(ckpt_dir / "checkpoint_last.pt")
    files = {}

    files["bare"] = tmp_path / "bare.pt"
    torch.save({"model": {}, "evil": payload_cls(marker)}, files["bare"])

    # a real fairseq checkpoint with the payload hidden where our allowed types live
    real_evil = dict(real)
    real_evil["cfg"] = dict(real["cfg"])
    real_evil["cfg"]["model"] = argparse.Namespace(**vars(real["cfg"]["model"]), evil=payload_cls(marker))
    files["in_namespace"] = tmp_path / "in_namespace.pt"
    torch.save(real_evil, files["in_namespace"])

    files["legacy_pickle"] = tmp_path / "legacy_pickle.pt"  # torch's pre-zip format
    torch.save({"model": {}, "evil": payload_cls(marker)}, files["legacy_pickle"],
               _use_new_zipfile_serialization=False)
    return marker, files


@pytest.mark.parametrize("payload_cls", [Payload, PythonPayload])
def test_malicious_checkpoint_is_refused(tmp_path, ckpt_dir, payload_cls):
    # positive control: the payload is live when unpickled without restrictions
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(payload_cls(control)))
    assert control.exists()

    marker, files = _malicious_checkpoints(tmp_path, ckpt_dir, payload_cls)
    for kind, path in files.items():
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
            torch.load(path)
        with pytest.raises(CheckpointError, match=f"^{path}: refused by safe loading: the "
                           "file refers to "):  # named, and no advice to load it unsafely
            checkpoint_utils.load_checkpoint_to_cpu(str(path))
        assert not marker.exists(), f"payload ran while loading the {kind} checkpoint"
    # (fairseq-generate/-interactive/-train load through load_checkpoint_to_cpu, tested above)


def test_fairseq_interactive_loads_real_checkpoint(ckpt_dir, tmp_path_factory):
    """fairseq-interactive loads a fairseq-train checkpoint (fairseq-generate: test_average.py)."""
    data = data_bin(tmp_path_factory)
    source = (data.parent / "test.src").read_text().splitlines()[:3]
    _, out = run_tool(
        "fairseq-interactive", data, "--user-dir", USER_DIR, "--path", ckpt_dir / "checkpoint_last.pt",
        "--cpu", "--beam", "2", "--source-lang", "src", "--target-lang", "tgt",
        input="\n".join(source) + "\n",
    )
    assert sorted(line.split("\t")[0] for line in out.splitlines() if line.startswith("H-")) == [
        "H-0", "H-1", "H-2"
    ]


def test_hydra_train_checkpoint_loads(tmp_path, tmp_path_factory):
    """fairseq-hydra-train stores the model config as a plain dict (no Namespace)."""
    data = data_bin(tmp_path_factory)
    model = "".join(
        f"  {key}: {value}\n"
        for key, value in [
            ("_name", "transformer_cycle_rev"), ("share_all_embeddings", "true"),
            ("encoder_layers", 4), ("decoder_layers", 4),
            ("encoder_unique_layers", 2), ("decoder_unique_layers", 2),
            ("encoder_embed_dim", 32), ("decoder_embed_dim", 32),
            ("encoder_ffn_embed_dim", 64), ("decoder_ffn_embed_dim", 64),
            ("encoder_attention_heads", 2), ("decoder_attention_heads", 2), ("dropout", 0),
        ]
    )
    (tmp_path / "tiny.yaml").write_text(
        "# @package _global_\n"
        f"common:\n  cpu: true\n  user_dir: {USER_DIR}\n  no_progress_bar: true\n"
        f"task:\n  _name: translation\n  data: {data}\n"
        "criterion:\n  _name: cross_entropy\n"
        "optimizer:\n  _name: adam\n"
        "lr_scheduler:\n  _name: fixed\n"
        "optimization:\n  lr: [0.002]\n  max_update: 2\n"
        "dataset:\n  max_tokens: 500\n  num_workers: 0\n"
        f"checkpoint:\n  save_dir: {tmp_path / 'ckpt'}\n  no_epoch_checkpoints: true\n"
        "model:\n" + model
    )
    run_tool(
        "fairseq-hydra-train", "--config-dir", tmp_path, "--config-name", "tiny",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    )
    path = tmp_path / "ckpt" / "checkpoint_last.pt"
    raw = torch.load(path)
    assert isinstance(raw["cfg"]["model"], dict)
    assert raw["cfg"]["model"]["_name"] == "transformer_cycle_rev"
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    assert models[0].encoder.layers[3].fc1.weight is models[0].encoder.layers[0].fc1.weight


# ---- 4. NumPy 2: the NumPy 1.x spellings of three fairseq data modules ------------------
import numpy  # noqa: E402
from fairseq.data import data_utils, language_pair_dataset, token_block_dataset  # noqa: E402

from helpers_model import make_dictionary  # noqa: E402

SENTENCES = [[5, 6, 2], [7, 2], [8, 9, 10, 11, 2], [12, 2]]  # eos = 2
NUMPY2 = not hasattr(numpy, "compat")


@pytest.mark.skipif(not NUMPY2, reason="NumPy < 2 has numpy.compat: nothing to fix")
def test_numpy1_spellings_are_given_to_the_three_fairseq_modules_only():
    assert compat.provide_numpy1_spellings()  # idempotent: already applied on import
    for module in (token_block_dataset, language_pair_dataset, data_utils):
        assert module.np.compat.long is int
        assert module.np.zeros is numpy.zeros and module.np.int64 is numpy.int64
    percentiles = data_utils.np.percentile([1, 2, 3, 9], [50, 100], interpolation="lower")
    assert percentiles.tolist() == [2, 9]
    assert not hasattr(numpy, "compat")  # numpy itself, and every other module, unchanged
    from fairseq.data import indexed_dataset

    assert indexed_dataset.np is numpy


def _token_blocks():
    return token_block_dataset.TokenBlockDataset(
        [torch.tensor(s) for s in SENTENCES], [len(s) for s in SENTENCES], block_size=None,
        pad=1, eos=2, break_mode="eos",
    )


def test_token_block_dataset_breaks_at_eos(monkeypatch):
    """language_modeling --sample-break-mode eos: one block per sentence."""
    blocks = _token_blocks()
    assert [blocks[i].tolist() for i in range(len(blocks))] == SENTENCES
    assert blocks.block_to_dataset_index[:, 1].tolist() == [0, 0, 0, 0]
    if NUMPY2:  # without the fix, fairseq fails here
        monkeypatch.setattr(token_block_dataset, "np", numpy)
        with pytest.raises(AttributeError, match="compat"):
            _token_blocks()


def _bucketed_pairs():
    d = make_dictionary()
    src = [torch.tensor(s) for s in SENTENCES]
    tgt = [torch.tensor(s[-2::-1] + [2]) for s in SENTENCES]
    sizes = numpy.array([len(s) for s in SENTENCES])
    return language_pair_dataset.LanguagePairDataset(src, sizes, d, tgt, sizes, d, num_buckets=2)


@pytest.mark.parametrize("module", [None, language_pair_dataset, data_utils])
def test_language_pair_dataset_with_batch_buckets(module, monkeypatch):
    """translation --num-batch-buckets: lengths padded to 2 buckets, batches collate."""
    if module is not None:  # without the fix in either module, fairseq fails here
        if not NUMPY2:
            pytest.skip("NumPy < 2: nothing to fix")
        monkeypatch.setattr(module, "np", numpy)
        with pytest.raises((AttributeError, TypeError), match="compat|interpolation"):
            _bucketed_pairs()
        return
    pairs = _bucketed_pairs()
    # lengths 3 2 5 2, bucket bounds the 50th/100th percentiles ("lower"): 2 and 5
    assert [int(b) for _, b in pairs.buckets] == [2, 5]
    assert pairs.bucketed_num_tokens.dtype == numpy.int64
    assert pairs.bucketed_num_tokens.tolist() == [5, 2, 5, 2]
    batch = pairs.collater([pairs[i] for i in range(len(pairs))])
    assert batch["net_input"]["src_tokens"].shape == (4, 5)
