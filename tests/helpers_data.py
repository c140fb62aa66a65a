"""Small real fairseq data and checkpoints for tests, built once per pytest run.

Test modules call these helpers from their own fixtures (passing ``tmp_path_factory``);
results are built under :func:`shared_root`, a directory every xdist worker of the run sees,
with a file lock around each build, so every module of every worker shares the same corpus
and the same trained checkpoints (tests must not write into them: copy first). Everything runs
the real fairseq command-line tools with ``OMP_NUM_THREADS=1``.
"""

import contextlib
import fcntl
import json
import os
import shutil
import random
import sys
from pathlib import Path

import helpers_forkserver
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


def shared_root(tmp_path_factory) -> Path:
    """This pytest run's base temp dir; under xdist the controller's, which every worker's
    own base temp dir (``popen-gwN``) sits in, so that the workers share what is built here."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root = base / "shared"
    root.mkdir(exist_ok=True)
    return root


@contextlib.contextmanager
def shared_build(tmp_path_factory, name):
    """Hold the run-wide lock of the artefact NAME; yield (its dir, whether it is complete).
    The caller builds into the dir when it is not complete (anything left there by a failed
    build is removed first); leaving the block without an error marks the build complete."""
    root = shared_root(tmp_path_factory)
    out, done = root / name, root / f"{name}.complete"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            complete = done.exists()
            if not complete and out.exists():
                shutil.rmtree(out)
            yield out, complete
            if not complete:
                done.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def shared_toy_corpus(tmp_path_factory) -> str:
    """fairseq_shared.data.toydata's corpus (default seed and vocabulary), built once per run."""
    from fairseq_shared.data.toydata import build_toy_corpus

    with shared_build(tmp_path_factory, "toy") as (out, _):
        return build_toy_corpus(str(out))  # idempotent: returns at once when complete


def shared_main_job(tmp_path_factory, toy):
    """The run dir of the main job's training stage with the ``tiny`` budget (vanilla 2+2 and
    cycle_rev 4+4 over 2 sets, 8 updates each) on the shared toy corpus, trained once per run;
    returns (run dir, {name: checkpoint}). Tests that write into the run dir work on a copy."""
    from harness.configs import load_budget
    from harness import main_job

    with shared_build(tmp_path_factory, "main_job") as (out, complete):
        listing = out.parent / "main_job.checkpoints.json"
        if not complete:
            records = main_job.train_models(toy, str(out), load_budget("tiny"),
                                            progress=lambda m: None)
            listing.write_text(json.dumps({name: r["checkpoint"] for name, r in records.items()}))
        return str(out), json.loads(listing.read_text())


def run_tool(tool, *args, check=True, env=None, timeout=300, input=None):
    """Run ``fairseq-TOOL`` (found as the package finds it) or another console script from
    this virtualenv; return (returncode, stdout+stderr). A plug-in fairseq run is a fork of
    this worker's fork server (tests/helpers_forkserver.py), the others a new process."""
    name = tool[len("fairseq-"):] if tool.startswith("fairseq-") else None
    exe = fairseq_tool(name) if name in TOOLS else [str(BIN / tool)]
    cmd = [*exe, *map(str, args)]
    result = helpers_forkserver.run(cmd, env or ENV, timeout=timeout, input=input)
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
        with shared_build(tmp_path_factory, "corpus") as (root, complete):
            if not complete:
                root.mkdir()
                _make_corpus(root)
        _CACHE["data_bin"] = root / "bin"
    return _CACHE["data_bin"]


def trained_checkpoints(tmp_path_factory) -> Path:
    """A save dir with checkpoint1.pt .. checkpoint3.pt and checkpoint_last.pt.

    Trained by ``fairseq-train`` for 3 short epochs with ``--eval-bleu``, so the checkpoints
    also carry the numpy arrays fairseq keeps in its BLEU metrics state.
    """
    if "trained" not in _CACHE:
        data = data_bin(tmp_path_factory)
        with shared_build(tmp_path_factory, "trained") as (save_dir, complete):
            if not complete:
                run_tool(
                    "fairseq-train", data, *TINY_ARCH, *TINY_TRAIN,
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


def generate_in_process(*args):
    """``fairseq-generate ARGS`` (its console script's ``cli_main``, with the plug-in already
    imported) in this process, without a Python start; returns what it prints. Batches are
    collated here (``--num-workers 0`` unless given): a loader process forked from the test
    process waits out torch's 5 s shutdown timeout. The hypotheses are the same."""
    import contextlib
    import io
    from unittest import mock

    from fairseq_cli import generate

    argv = ["fairseq-generate", *map(str, args)]
    if not any(a == "--num-workers" or a.startswith("--num-workers=") for a in argv):
        argv += ["--num-workers", "0"]
    out = io.StringIO()
    with mock.patch.object(sys, "argv", argv), contextlib.redirect_stdout(out):
        generate.cli_main()
    return out.getvalue()


def preprocess_in_process(*flags):
    """fairseq-preprocess's own main with FLAGS, in this process (a process start costs
    seconds of imports)."""
    from fairseq import options
    from fairseq_cli import preprocess as tool

    handlers = list(tool.logger.handlers)
    try:
        tool.main(options.get_preprocessing_parser().parse_args([str(f) for f in flags]))
    finally:  # it logs to DESTDIR/preprocess.log through a handler it never removes
        tool.logger.handlers = handlers
