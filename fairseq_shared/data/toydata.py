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

from fairseq_shared.data import pipeline

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
    data = {split: _sentences(n, rng) for split, n in SIZES.items()}
    for split, pairs in data.items():
        for j, lang in enumerate(("es", "en")):
            pipeline.write_lines(os.path.join(raw, f"{split}.{lang}"), (p[j] for p in pairs))
    joint = os.path.join(spmdir, "joint.txt")
    pipeline.write_lines(joint, (s for pair in data["train"] for s in pair))
    fresh = pipeline.fresh_dir_beside(os.path.join(out, "spm.model"), "spm")
    spm.SentencePieceTrainer.train(
        input=joint, model_prefix=os.path.join(fresh, "spm"), vocab_size=vocab_size,
        character_coverage=1.0, model_type="unigram", minloglevel=2,
    )
    for ext in ("model", "vocab"):
        os.replace(os.path.join(fresh, f"spm.{ext}"), os.path.join(out, f"spm.{ext}"))
    os.rmdir(fresh)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "spm.model"))
    for split in SIZES:
        for lang in ("es", "en"):
            pipeline.spm_encode_file(os.path.join(out, "spm.model"),
                                     os.path.join(raw, f"{split}.{lang}"),
                                     os.path.join(spmdir, f"{split}.{lang}"))
    pipeline.fairseq_preprocess(
        "es", "en", os.path.join(spmdir, "train"), os.path.join(out, "bin"),
        validpref=os.path.join(spmdir, "valid"), testpref=os.path.join(spmdir, "test"),
        joined=True, in_process=False)
    from fairseq_shared.data import audit

    audit.write_report(audit.audit_corpus(raw, k=3), out)
    pipeline.write_text(done, "")
    return out
