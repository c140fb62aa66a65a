"""Small real fairseq data and checkpoints for tests, built once per pytest session.

Test modules call these helpers from their own fixtures (passing ``tmp_path_factory``);
results are cached here, so every module in one session shares the same corpus and the
same trained checkpoints. Everything runs the real fairseq command-line tools with
``OMP_NUM_THREADS=1``.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from fairseq_shared.fairseq_commands import TOOLS, USER_DIR, fairseq_tool

BIN = Path(sys.executable).parent  # other console scripts (torchrun, fairseq-shared-average)
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

#: A tiny transformer_cycle_rev: 4+4 layers over 2 parameter sets, dim 32, no dropout.
TINY_ARCH = [
    "--user-dir", USER_DIR, "--arch", "transformer_cycle_rev",
    "--encoder-layers", "4", "--decoder-layers", "4",
    "--encoder-unique-layers", "2", "--decoder-unique-layers", "2",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings",
    "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
]
TINY_TRAIN = [
    "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "500", "--cpu",
    "--no-progress-bar", "--log-interval", "1", "--num-workers", "0",
]

_CACHE = {}


def run_tool(tool, *args, check=True, env=None, timeout=300, input=None):
    """Run ``fairseq-TOOL`` (found as the package finds it) or another console script from
    this virtualenv; return (returncode, stdout+stderr)."""
    name = tool[len("fairseq-"):] if tool.startswith("fairseq-") else None
    exe = fairseq_tool(name) if name in TOOLS else [str(BIN / tool)]
    cmd = [*exe, *map(str, args)]
    result = subprocess.run(
        cmd, env=env or ENV, capture_output=True, text=True, timeout=timeout, input=input
    )
    output = result.stdout + result.stderr
    if check:
        assert result.returncode == 0, f"{' '.join(cmd)}\n{output[-4000:]}"
    return result.returncode, output


def _make_corpus(root: Path) -> Path:
    """Reverse-the-sentence corpus over 24 words, binarized with a joined dictionary."""
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(24)]
    for split, n in [("train", 160), ("valid", 16), ("test", 12)]:
        src = [[rng.choice(vocab) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        (root / f"{split}.src").write_text("\n".join(" ".join(s) for s in src) + "\n")
        (root / f"{split}.tgt").write_text("\n".join(" ".join(s[::-1]) for s in src) + "\n")
    run_tool(
        "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", root / "train", "--validpref", root / "valid",
        "--testpref", root / "test", "--destdir", root / "bin",
        "--joined-dictionary", "--workers", "1",
    )
    return root / "bin"


def data_bin(tmp_path_factory) -> Path:
    """Binarized src->tgt corpus (train 160, valid 16, test 12 sentences)."""
    if "data_bin" not in _CACHE:
        _CACHE["data_bin"] = _make_corpus(tmp_path_factory.mktemp("corpus"))
    return _CACHE["data_bin"]


def trained_checkpoints(tmp_path_factory) -> Path:
    """A save dir with checkpoint1.pt .. checkpoint3.pt and checkpoint_last.pt.

    Trained by ``fairseq-train`` for 3 short epochs with ``--eval-bleu``, so the checkpoints
    also carry the numpy arrays fairseq keeps in its BLEU metrics state.
    """
    if "trained" not in _CACHE:
        save_dir = tmp_path_factory.mktemp("trained")
        run_tool(
            "fairseq-train", data_bin(tmp_path_factory), *TINY_ARCH, *TINY_TRAIN,
            "--max-epoch", "3", "--max-tokens", "700", "--seed", "1",
            "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 12}',
            "--save-dir", save_dir,
        )
        _CACHE["trained"] = save_dir
    return _CACHE["trained"]


# ---- a tiny fake Bible corpus (the shape of fairseq_shared.cli.bible's output) ----

FAKE_BIBLE_WORDS = (
    "in the beginning god created heaven and earth light was good day night said let "
    "there be waters under above firmament evening morning"
).split()
FAKE_BIBLE_BOOKS = {"train": ["Gen", "Exod"], "valid": ["Acts"], "test": ["John"]}
FAKE_BIBLE_SIZES = {"train": 300, "valid": 20, "test": 23}


def make_fake_bible(root):
    """raw/SPLIT.{en,ids}, spm.model (trained with a "Spanish" side, so that some pieces never
    occur in English train), audit.json, decontamination.json, stats.json."""
    import sentencepiece as spm

    rng = random.Random(3)
    raw = root / "raw"
    raw.mkdir(parents=True)
    for split, n in FAKE_BIBLE_SIZES.items():
        lines = [" ".join(rng.choice(FAKE_BIBLE_WORDS) for _ in range(rng.randint(3, 12)))
                 .capitalize() + "." for _ in range(n)]
        if split == "test":
            lines[0] = "Nathanael said, let there be light."  # pieces only the es side has
        (raw / f"{split}.en").write_text("".join(l + "\n" for l in lines))
        books = FAKE_BIBLE_BOOKS[split]
        (raw / f"{split}.ids").write_text("".join(f"{books[i % len(books)]} 1:{i + 1}\n"
                                                  for i in range(n)))
    es = root / "es.txt"
    es.write_text("Nathanael dijo: sea la luz.\n" * 30 + "En el principio creó Dios.\n" * 30)
    spm.SentencePieceTrainer.train(input=f"{raw / 'train.en'},{es}", model_prefix=str(root / "spm"),
                                   vocab_size=70, character_coverage=1.0, minloglevel=2,
                                   bos_id=-1, eos_id=-1, unk_id=0, hard_vocab_limit=False)
    share = {"50": 0.1, "60": 0.05, "70": 0.0, "80": 0.0, "90": 0.0}
    (root / "audit.json").write_text(json.dumps({"train_pairs": 300, "splits": {
        s: {"pairs": FAKE_BIBLE_SIZES[s],
            "exact_duplicates": {"source": 0, "target": 0, "pair": 0},
            "near_duplicate_share": share} for s in ("valid", "test")}}))
    (root / "decontamination.json").write_text(json.dumps(
        {"duplicate_pairs_dropped": 2, "near_duplicates_removed": 1, "threshold_chrf": 70}))
    (root / "stats.json").write_text(json.dumps({"test_books": ["John"], "valid_books": ["Acts"]}))
    return root
