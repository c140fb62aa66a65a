"""fairseq-preprocess -> fairseq-train --arch transformer_cycle_rev -> resume -> fairseq-generate."""

import os
import random
import re

import pytest
import torch

import helpers_forkserver
from fairseq_shared.fairseq_commands import USER_DIR, fairseq_tool
from helpers_data import preprocess_in_process
from helpers_params import model_params

ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
D, F = 64, 128
ARCH = [
    "--user-dir", USER_DIR, "--arch", "transformer_cycle_rev",
    "--encoder-layers", "4", "--decoder-layers", "4",
    "--encoder-unique-layers", "2", "--decoder-unique-layers", "2",
    "--encoder-embed-dim", str(D), "--decoder-embed-dim", str(D),
    "--encoder-ffn-embed-dim", str(F), "--decoder-ffn-embed-dim", str(F),
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings", "--dropout", "0",
]
TRAIN = [
    "--optimizer", "adam", "--lr", "0.002", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "5", "--criterion", "label_smoothed_cross_entropy",
    "--label-smoothing", "0.1", "--max-tokens", "600", "--cpu", "--seed", "3",
    "--no-progress-bar", "--log-interval", "1", "--num-workers", "0",
    "--no-epoch-checkpoints",
]


def run(tool, *args):
    result = helpers_forkserver.run([*fairseq_tool(tool[len("fairseq-"):]), *map(str, args)], ENV)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    """A small copy-and-reverse corpus: learnable in a few updates, real fairseq binarization."""
    root = tmp_path_factory.mktemp("e2e")
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(30)]
    for split, n in [("train", 300), ("valid", 20), ("test", 13)]:  # 13: not a multiple of 8
        src = [[rng.choice(vocab) for _ in range(rng.randint(3, 9))] for _ in range(n)]
        (root / f"{split}.src").write_text("\n".join(" ".join(s) for s in src) + "\n")
        (root / f"{split}.tgt").write_text("\n".join(" ".join(s[::-1]) for s in src) + "\n")
    preprocess_in_process(  # fairseq-preprocess's main, without a process start
        "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", root / "train", "--validpref", root / "valid", "--testpref", root / "test",
        "--destdir", root / "bin", "--joined-dictionary", "--workers", "1",
    )
    return root / "bin"


def train(data_bin, save_dir, max_update, *extra):
    return run("fairseq-train", data_bin, *ARCH, *TRAIN, "--save-dir", save_dir,
               "--max-update", max_update, *extra)


def test_train_resume_generate(data_bin, tmp_path):
    log = train(data_bin, tmp_path / "ckpt", 12)

    # fairseq-train logs the unique parameter count, which the closed form predicts
    logged = int(re.search(r"num\. shared model params: ([\d,]+)", log).group(1).replace(",", ""))
    vocab = sum(1 for _ in open(data_bin / "dict.src.txt")) + 4
    cycle_rev = [0, 1, 1, 0]
    assert logged == model_params(vocab, vocab, D, F, cycle_rev, cycle_rev, share_all_embeddings=True)

    # the checkpoint stores each tied tensor once: model + Adam's two moments ~ 3x unique weights
    ckpt = tmp_path / "ckpt" / "checkpoint_last.pt"
    unique_bytes = logged * 4
    assert os.path.getsize(ckpt) < 3 * unique_bytes * 1.05 + 200_000
    state = torch.load(ckpt)  # weights-only loading, allowed by fairseq_shared.compat
    assert "decoder.layers.3.fc1.weight" not in state["model"]
    assert "decoder.layers.0.fc1.weight" in state["model"]

    # the checkpoint loads back bit-exact, with its tied tensors tied again
    from fairseq import checkpoint_utils

    [model], _ = checkpoint_utils.load_model_ensemble([str(ckpt)])
    loaded = model.state_dict()
    assert loaded.keys() == state["model"].keys()
    for name, tensor in state["model"].items():
        assert torch.equal(loaded[name], tensor), name
    assert model.decoder.layers[3].fc1.weight is model.decoder.layers[0].fc1.weight

    # --restore-file (default checkpoint_last.pt) resumes at update 12 instead of restarting
    log = train(data_bin, tmp_path / "ckpt", 24)
    assert re.search(r"[Ll]oaded checkpoint .*@ 12 updates", log)
    assert re.search(r"num_updates 24\b", log)

    # fairseq-generate with beam search translates every test sentence
    out = run(
        "fairseq-generate", data_bin, "--user-dir", USER_DIR, "--path", ckpt, "--beam", "4",
        "--cpu", "--batch-size", "5", "--required-batch-size-multiple", "1", "--gen-subset", "test",
    )
    hypotheses = [line for line in out.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 13
    assert "BLEU" in out

    # fairseq-interactive reads the same checkpoint
    result = helpers_forkserver.run(
        [*fairseq_tool("interactive"), data_bin, "--user-dir", USER_DIR, "--path", ckpt,
         "--beam", "4", "--cpu", "--source-lang", "src", "--target-lang", "tgt"],
        ENV, input="w1 w2 w3\nw4 w5\n",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert [line.split("\t")[0] for line in result.stdout.splitlines() if line.startswith("H-")] == [
        "H-0", "H-1"
    ]


def test_invalid_flag_stops_fairseq_train_with_a_clear_error(data_bin, tmp_path):
    result = helpers_forkserver.run(
        [*fairseq_tool("train"), data_bin, *ARCH, *TRAIN, "--save-dir", tmp_path,
         "--max-update", "1", "--decoder-share-strategy", "cyclic"], ENV,
    )
    assert result.returncode != 0
    assert "--decoder-share-strategy: unknown strategy 'cyclic'; allowed: none, sequence" in result.stderr
    assert not list(tmp_path.glob("*.pt"))
