"""A tiny synthetic Spanish->English corpus in the Bible corpus's layout (for tests and
``--budget tiny``): ``raw/{train,valid,test}.{es,en}``, a joint ``spm.model`` and
``bin/`` from ``fairseq-preprocess --joined-dictionary``, and the contamination audit
(``audit.json``, lookup baseline) as the Bible build writes it.

The "translation" is a word-for-word mapping of a small vocabulary, so a tiny model learns
something within a few dozen updates. Sizes are chosen so that the test set (23 sentences)
is not a multiple of 8 (fairseq's default ``--required-batch-size-multiple``).
"""

import os
import random
import subprocess

from fairseq_shared.fairseq_commands import fairseq_tool

ES = "uno dos tres cuatro cinco seis siete ocho nueve diez casa perro gato agua sol luna " \
     "dios tierra cielo hombre mujer rey dijo dia noche".split()
EN = "one two three four five six seven eight nine ten house dog cat water sun moon " \
     "god earth heaven man woman king said day night".split()
SIZES = {"train": 600, "valid": 20, "test": 23}


def _sentences(n, rng):
    pairs = []
    for _ in range(n):
        k = rng.randint(3, 12)
        idx = [rng.randrange(len(ES)) for _ in range(k)]
        es = " ".join(ES[i] for i in idx).capitalize() + "."
        en = " ".join(EN[i] for i in idx).capitalize() + "."
        pairs.append((es, en))
    return pairs


def build_toy_corpus(out: str, seed: int = 1, vocab_size: int = 80) -> str:
    """Create the corpus under ``out`` (idempotent: returns at once if ``bin/`` is complete)."""
    out = os.path.abspath(out)
    done = os.path.join(out, "bin", ".complete")
    if os.path.exists(done):
        return out
    import sentencepiece as spm

    rng = random.Random(seed)
    raw = os.path.join(out, "raw")
    spmdir = os.path.join(out, "spm")
    os.makedirs(raw, exist_ok=True)
    os.makedirs(spmdir, exist_ok=True)
    data = {split: _sentences(n, rng) for split, n in SIZES.items()}
    for split, pairs in data.items():
        for j, lang in enumerate(("es", "en")):
            with open(os.path.join(raw, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.write("".join(p[j] + "\n" for p in pairs))
    joint = os.path.join(spmdir, "joint.txt")
    with open(joint, "w", encoding="utf-8") as f:
        for es, en in data["train"]:
            f.write(es + "\n" + en + "\n")
    spm.SentencePieceTrainer.train(
        input=joint, model_prefix=os.path.join(out, "spm"), vocab_size=vocab_size,
        character_coverage=1.0, model_type="unigram", minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "spm.model"))
    for split in SIZES:
        for lang in ("es", "en"):
            with open(os.path.join(raw, f"{split}.{lang}"), encoding="utf-8") as f:
                lines = [line.rstrip("\n") for line in f]
            with open(os.path.join(spmdir, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.write("".join(" ".join(sp.encode(l, out_type=str)) + "\n" for l in lines))
    subprocess.run(
        fairseq_tool("preprocess") + [
            "--source-lang", "es", "--target-lang", "en",
            "--trainpref", os.path.join(spmdir, "train"),
            "--validpref", os.path.join(spmdir, "valid"),
            "--testpref", os.path.join(spmdir, "test"),
            "--destdir", os.path.join(out, "bin"), "--joined-dictionary", "--workers", "1",
        ],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    from fairseq_shared.data import audit

    audit.write_report(audit.audit_corpus(raw, k=3), out)
    open(done, "w").close()
    return out
