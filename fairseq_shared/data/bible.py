"""Offline Spanish->English corpus: Reina-Valera 1909 (``spaRV1909eb``) and the World English
Bible (``engWEB2015eb``), the SWORD modules of the Debian packages sword-text-sparv and
sword-text-web.

    python -m fairseq_shared.cli.bible --out work/bible [--vocab-size 8000]
                                        [--test-book John --valid-book Acts]

Stages (each restartable, see ``pipeline.Stages``):

1. ``extract``  read both modules with pysword (raw OSIS), clean each verse (``osis.py``), pair
   verses on book/chapter/verse, drop empty or one-sided verses and pairs the length-based
   alignment check rejects (``align.py``; versification differences), -> ``corpus.tsv``
   (book, chapter, verse, es, en).
2. ``split``    held-out books: every verse of the test book(s) -> test, of the valid book(s)
   -> valid, the rest -> train; train loses repeated identical pairs and every near-duplicate
   (sentence chrF >= 70 on either side) of a valid or test pair (``decontamination.json``)
   -> ``raw/{train,valid,test}.{es,en}`` (+ ``.ids``).
   ``audit``    :mod:`fairseq_shared.data.audit` on the splits -> ``audit.{json,md}`` and the
   lookup baseline ``lookup.{valid,test}.en``; the build stops when more than 1% of test pairs
   still have a training near-duplicate.
3. ``spm``      joint sentencepiece (unigram, ``--vocab-size``) on the train side only -> ``spm.model``.
4. ``encode``   -> ``spm/{train,valid,test}.{es,en}``.
5. ``binarize`` ``fairseq-preprocess --joined-dictionary --workers 1`` -> ``bin/`` (src es, tgt en).

Then ``stats.json`` and ``README.md`` describe the splits.
"""

import collections
import json
import time
from pathlib import Path

from fairseq_shared.data import audit, pipeline
from fairseq_shared.data.align import align_11
from fairseq_shared.data.pipeline import log
from fairseq_shared.data.sword import (  # noqa: F401  (part of this module's interface)
    COLOPHON_BOOKS, DEBIAN_PACKAGES, INSTALL_HINT, SRC, SRC_MODULE, SWORD_PATH, TGT, TGT_MODULE,
    MissingModulesError, book_order, check_modules, clean_module, read_module, strip_colophon,
)

# RV1909 numbers Job 38:39-41:34 the Spanish way inside a KJV frame: no verse number of these
# chapters pairs reliably (the alignment check alone lets a few chance matches through).
EXCLUDED_CHAPTERS = {("Job", 39), ("Job", 40), ("Job", 41)}
SPLITS = ("train", "valid", "test")


def pair_verses(src, tgt, excluded_chapters=EXCLUDED_CHAPTERS):
    """Pair two {ref: text} dicts on the reference; returns (pairs, stats).

    ``pairs`` is a list of (book, chapter, verse, src_text, tgt_text) in canonical order.
    """
    stats = collections.Counter()
    books = list(dict.fromkeys(k[0] for k in src if k in tgt))
    stats["src_verses"] = sum(1 for v in src.values() if v)
    stats["tgt_verses"] = sum(1 for v in tgt.values() if v)
    # expected length ratio from the verses present on both sides (one-sided ones would bias it)
    both_all = [k for k in src if src[k] and tgt.get(k)]
    ratio = max(sum(len(tgt[k]) for k in both_all), 1) / max(sum(len(src[k]) for k in both_all), 1)
    pairs = []
    for book in books:
        s_keys = [k for k in src if k[0] == book and src[k]]
        t_keys = [k for k in tgt if k[0] == book and tgt[k]]
        t_set = set(t_keys)
        both = [k for k in s_keys if k in t_set]
        stats["one_sided"] += len(s_keys) + len(t_keys) - 2 * len(both)
        beads = align_11([len(src[k]) for k in s_keys], [len(tgt[k]) for k in t_keys], ratio)
        confirmed = {s_keys[i] for i, j in beads if s_keys[i] == t_keys[j]}
        for key in both:
            if key[:2] in excluded_chapters:
                stats["dropped_excluded_chapter"] += 1
            elif key not in confirmed:
                stats["dropped_misaligned"] += 1
            else:
                pairs.append((key[0], key[1], key[2], src[key], tgt[key]))
    stats["pairs"] = len(pairs)
    return pairs, dict(stats)


def extract_pairs(books=None, sword_path=SWORD_PATH):
    """Read, clean and pair the two modules (all books, or only ``books``)."""
    check_modules(sword_path)
    t0 = time.time()
    src = clean_module(read_module(SRC_MODULE, books, sword_path), recase=True)
    log(f"read {SRC_MODULE}: {sum(1 for v in src.values() if v)} non-empty verses "
        f"({time.time() - t0:.0f}s)")
    tgt = clean_module(read_module(TGT_MODULE, books, sword_path))
    log(f"read {TGT_MODULE}: {sum(1 for v in tgt.values() if v)} non-empty verses "
        f"({time.time() - t0:.0f}s)")
    pairs, stats = pair_verses(src, tgt)
    log(f"paired: {stats}")
    return pairs, stats


# Held-out books of the default split. John and Acts have almost no parallel passage in the
# other books (measured: 0.0% and 0.5% of verses with a training near-duplicate at chrF >= 70,
# lookup BLEU 5-7), unlike the synoptic gospels (Matthew 6.2% against Luke, lookup BLEU 16-20).
TEST_BOOKS, VALID_BOOKS = ("John",), ("Acts",)
MAX_TEST_CONTAMINATION = 0.01  # the build stops above 1% test near-duplicates (chrF >= 70)


class ContaminationError(RuntimeError):
    pass


def split_pairs(pairs, test_books=TEST_BOOKS, valid_books=VALID_BOOKS):
    """Held-out books: {split: [pair, ...]}. Book names compare case-insensitively."""
    test = {b.lower() for b in test_books}
    valid = {b.lower() for b in valid_books}
    if test & valid:
        raise ValueError(f"a book cannot be both test and valid: {sorted(test & valid)}")
    out = {s: [] for s in SPLITS}
    for pair in pairs:
        book = pair[0].lower()
        out["test" if book in test else "valid" if book in valid else "train"].append(pair)
    for split, books in (("test", test_books), ("valid", valid_books)):
        if not out[split]:
            raise ValueError(f"no verse of {list(books)} in the corpus: empty {split} split")
    return out


def deduplicate(pairs):
    """Drop repeated identical (source, target) pairs, keeping the first; returns (kept, dropped)."""
    seen, kept = set(), []
    for pair in pairs:
        if pair[3:5] not in seen:
            seen.add(pair[3:5])
            kept.append(pair)
    return kept, len(pairs) - len(kept)


def decontaminate(splits, threshold=audit.NEAR_DUPLICATE, k=audit.DEFAULT_K):
    """Remove from train every pair that is a near-duplicate (sentence chrF >= ``threshold``
    on either side) of a valid or test pair, and repeated identical pairs.

    Returns (new splits, stats with the removed references)."""
    train, dropped = deduplicate(splits["train"])
    t_src, t_tgt = [p[3] for p in train], [p[4] for p in train]
    indexes = (audit.CharNgramIndex(t_src), audit.CharNgramIndex(t_tgt))
    removed = set()
    for split in ("valid", "test"):
        held = splits[split]
        closest = audit.closest_train([p[3] for p in held], [p[4] for p in held], t_src, t_tgt,
                                      k, indexes)
        removed.update(audit.contaminated_train_indices(closest, threshold))
    stats = {"duplicate_pairs_dropped": dropped, "near_duplicates_removed": len(removed),
             "threshold_chrf": threshold,
             "removed": [f"{train[j][0]} {train[j][1]}:{train[j][2]}" for j in sorted(removed)]}
    clean_train = [p for j, p in enumerate(train) if j not in removed]
    return {**splits, "train": clean_train}, stats


# --------------------------------------------------------------------------- corpus build

def write_tsv(path, pairs):
    pipeline.write_lines(path, ("\t".join(map(str, p)) for p in pairs))


def read_tsv(path):
    pairs = []
    for line in pipeline.read_lines(path):
        book, chapter, verse, src, tgt = line.split("\t")
        pairs.append((book, int(chapter), int(verse), src, tgt))
    return pairs


def build(out, vocab_size=8000, test_books=TEST_BOOKS, valid_books=VALID_BOOKS, books=None,
          sword_path=SWORD_PATH, model_type="unigram",
          max_test_contamination=MAX_TEST_CONTAMINATION):
    """Build the corpus under ``out`` (restartable); returns the stats dict."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    check_modules(sword_path)
    stages = pipeline.Stages(out)
    tsv = out / "corpus.tsv"
    extract_stats = out / "extract_stats.json"

    def do_extract():
        pairs, stats = extract_pairs(books, sword_path)
        write_tsv(tsv, pairs)
        pipeline.write_text(extract_stats, json.dumps(stats, indent=1))

    stages.run("extract", [tsv, extract_stats], do_extract,
               params={"books": books, "modules": [SRC_MODULE, TGT_MODULE], "version": 4})

    raw = out / "raw"
    raw_files = [raw / f"{s}.{l}" for s in SPLITS for l in (SRC, TGT)]

    def do_split():
        splits, removed = decontaminate(split_pairs(read_tsv(tsv), test_books, valid_books))
        pipeline.write_text(out / "decontamination.json", json.dumps(removed, indent=1) + "\n")
        log(f"train: dropped {removed['duplicate_pairs_dropped']} repeated pairs and "
            f"{removed['near_duplicates_removed']} near-duplicates of valid/test "
            f"(chrF >= {removed['threshold_chrf']})")
        for split, pairs in splits.items():
            pipeline.write_lines(raw / f"{split}.{SRC}", (p[3] for p in pairs))
            pipeline.write_lines(raw / f"{split}.{TGT}", (p[4] for p in pairs))
            pipeline.write_lines(raw / f"{split}.ids", (f"{p[0]} {p[1]}:{p[2]}" for p in pairs))
            log(f"split {split}: {len(pairs)} verse pairs")

    stages.run("split", raw_files + [out / "decontamination.json"], do_split,
               params={"test": list(test_books), "valid": list(valid_books),
                       "decontaminate": audit.NEAR_DUPLICATE, "version": 2}, after=["extract"])

    def do_audit():
        audit.write_report(audit.audit_corpus(raw, SRC, TGT), out)

    stages.run("audit", [out / "audit.json", out / "audit.md"], do_audit, after=["split"])
    check_contamination(out, max_test_contamination)

    spm_prefix = out / "spm"  # -> spm.model / spm.vocab

    def do_spm():
        pipeline.train_sentencepiece([raw / f"train.{SRC}", raw / f"train.{TGT}"], spm_prefix,
                                     vocab_size, model_type=model_type)

    stages.run("spm", [out / "spm.model"], do_spm,
               params={"vocab_size": vocab_size, "model_type": model_type}, after=["split"])

    enc = out / "spm"
    enc_files = [enc / f"{s}.{l}" for s in SPLITS for l in (SRC, TGT)]

    def do_encode():
        for s in SPLITS:
            for l in (SRC, TGT):
                n = pipeline.spm_encode_file(out / "spm.model", raw / f"{s}.{l}", enc / f"{s}.{l}")
                log(f"encoded {s}.{l}: {n} lines")

    stages.run("encode", enc_files, do_encode, after=["spm"])

    bin_dir = out / "bin"

    def do_binarize():
        pipeline.fairseq_preprocess(SRC, TGT, enc / "train", bin_dir, validpref=enc / "valid",
                                    testpref=enc / "test", joined=True)

    stages.run("binarize", [bin_dir / f"dict.{SRC}.txt", bin_dir / f"train.{SRC}-{TGT}.{SRC}.bin",
                            bin_dir / f"test.{SRC}-{TGT}.{TGT}.idx"],
               do_binarize, after=["encode"])

    stats = corpus_stats(out, test_books, valid_books, vocab_size)
    pipeline.write_text(out / "stats.json", json.dumps(stats, indent=1) + "\n")
    pipeline.write_text(out / "README.md", readme_text(stats))
    log(f"corpus ready in {out}: " + ", ".join(
        f"{s} {stats['splits'][s]['pairs']}" for s in SPLITS))
    return stats


def check_contamination(out, max_share):
    """Stop when the audit finds more test near-duplicates than ``max_share``."""
    report = json.loads((Path(out) / "audit.json").read_text(encoding="utf-8"))
    share = audit.test_contamination(report)
    log(f"audit: test near-duplicates (chrF >= {audit.NEAR_DUPLICATE}) {100 * share:.2f}%, "
        f"lookup BLEU {report['splits']['test']['lookup']['bleu']:.2f}")
    if max_share is not None and share > max_share:
        raise ContaminationError(
            f"{100 * share:.2f}% of test pairs have a near-duplicate in train (chrF >= "
            f"{audit.NEAR_DUPLICATE}), above the allowed {100 * max_share:.2f}% "
            f"(--max-test-contamination); see {Path(out) / 'audit.md'}")


def corpus_stats(out, test_books, valid_books, vocab_size):
    out = Path(out)
    stats = {
        "source": {SRC: SRC_MODULE, TGT: TGT_MODULE},
        "test_books": list(test_books), "valid_books": list(valid_books),
        "vocab_size": vocab_size,
        "extract": json.loads((out / "extract_stats.json").read_text()),
        "splits": {},
    }
    for s in SPLITS:
        entry = {"pairs": pipeline.count_lines(out / "raw" / f"{s}.{SRC}")}
        for l in (SRC, TGT):
            words = pieces = 0
            with open(out / "raw" / f"{s}.{l}", encoding="utf-8") as f:
                words = sum(len(line.split()) for line in f)
            with open(out / "spm" / f"{s}.{l}", encoding="utf-8") as f:
                pieces = sum(len(line.split()) for line in f)
            entry[f"{l}_words"], entry[f"{l}_pieces"] = words, pieces
        ids = pipeline.read_lines(out / "raw" / f"{s}.ids")
        entry["books"] = len({i.split()[0] for i in ids})
        stats["splits"][s] = entry
    dict_file = out / "bin" / f"dict.{SRC}.txt"
    stats["dictionary_size"] = pipeline.count_lines(dict_file) + 4  # + fairseq's 4 specials
    return stats


def readme_text(stats):
    rows = "\n".join(
        f"| {s} | {e['books']} | {e['pairs']} | {e[SRC + '_words']} | {e[TGT + '_words']} | "
        f"{e[SRC + '_pieces']} | {e[TGT + '_pieces']} |" for s, e in stats["splits"].items())
    return f"""# Spanish->English Bible corpus

Built by `python -m fairseq_shared.cli.bible` from the SWORD modules {SRC_MODULE} (Reina-Valera
1909) and {TGT_MODULE} (World English Bible). Test books: {', '.join(stats['test_books'])};
valid books: {', '.join(stats['valid_books'])}; every other book is training data.

| split | books | verse pairs | es words | en words | es pieces | en pieces |
|---|---|---|---|---|---|---|
{rows}

Extraction: {json.dumps(stats['extract'])}

Joint sentencepiece (trained on the train side only), requested vocabulary {stats['vocab_size']};
fairseq dictionary: {stats['dictionary_size']} entries.

- raw/SPLIT.{{es,en}}: plain detokenized text, one verse per line; raw/SPLIT.ids: references.
- spm/SPLIT.{{es,en}}: sentencepiece pieces. bin/: fairseq-preprocess output (src es, tgt en).
"""
