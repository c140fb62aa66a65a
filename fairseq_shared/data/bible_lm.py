"""The English (World English Bible) side of the clean Bible corpus as a language-model corpus.

    python -m fairseq_shared.cli.bible_lm --bible work/bible --out work/bible_lm

Reads a corpus built by :mod:`fairseq_shared.data.bible` (``raw/{train,valid,test}.en`` and
``.ids``, ``spm.model``, ``audit.json``, ``decontamination.json``) and keeps its split as it
is: train = ``raw/train.en`` (already decontaminated against the held-out books), valid and
test = the held-out books (Acts and John by default; checked against ``raw/SPLIT.ids`` and
the corpus's ``stats.json``). Stages (restartable, ``pipeline.Stages``):

1. ``copy``     ``raw/SPLIT.en`` and ``raw/SPLIT.ids``, plus the corpus's audit records;
2. ``encode``   the corpus's own sentencepiece model, one verse per line -> ``tok/SPLIT.en``
   (the pieces of the translation target side);
3. ``binarize`` ``fairseq-preprocess --only-source`` with the dictionary of the English
   training pieces -> ``bin/`` (``dict.txt``, ``{train,valid,test}.{bin,idx}``) for
   ``--task language_modeling``.

Then ``stats.json`` and ``README.md``: lines, pieces and scored tokens (pieces + one
``</s>`` per verse) per split, the vocabulary, the held-out pieces missing from it (they
become ``<unk>``), and the audit numbers the corpus carries.
"""

import hashlib
import json
from collections import Counter
from pathlib import Path

from fairseq_shared.data import pipeline
from fairseq_shared.data.pipeline import log

SPLITS = ("train", "valid", "test")
LANG = "en"
DEFAULT_HELD_OUT = {"test": ["John"], "valid": ["Acts"]}
AUDIT_FILES = ("audit.json", "audit.md", "decontamination.json")


def held_out_books(bible: Path) -> dict:
    """{split: books} of the corpus's held-out splits (its stats.json, else John/Acts)."""
    stats = bible / "stats.json"
    if not stats.exists():
        return dict(DEFAULT_HELD_OUT)
    s = json.loads(stats.read_text(encoding="utf-8"))
    return {"test": list(s["test_books"]), "valid": list(s["valid_books"])}


def check_split(bible: Path, held_out: dict) -> None:
    """Every valid/test verse comes from its held-out books, and no train verse does."""
    all_held = {b.lower() for books in held_out.values() for b in books}
    for split in SPLITS:
        ids = pipeline.read_lines(bible / "raw" / f"{split}.ids")
        books = {i.split()[0] for i in ids}
        if split == "train":
            bad = sorted(b for b in books if b.lower() in all_held)
        else:
            bad = sorted(b for b in books if b.lower() not in
                         {x.lower() for x in held_out[split]})
        if bad:
            raise ValueError(f"{bible}/raw/{split}.ids: books {bad} do not belong to the "
                             f"{split} split (held out: {held_out})")
        n_text = pipeline.count_lines(bible / "raw" / f"{split}.{LANG}")
        if n_text != len(ids):
            raise ValueError(f"{bible}/raw/{split}.{LANG} has {n_text} lines, {split}.ids "
                             f"{len(ids)}")


def preprocess_command(tok: Path, dest: Path) -> list:
    from fairseq_shared.fairseq_commands import fairseq_command

    # fairseq-preprocess takes no positional DATA: its first flag stands in that place
    return fairseq_command("preprocess", "--only-source",
                           "--trainpref", tok / f"train.{LANG}",
                           "--validpref", tok / f"valid.{LANG}",
                           "--testpref", tok / f"test.{LANG}",
                           "--destdir", dest, "--workers", "1", user_dir=False)


def read_dictionary(path: Path) -> dict:
    """{symbol: count} of a fairseq ``dict.txt`` (fairseq's 4 specials are not in the file;
    the ``madeupwordNNNN`` entries of count 0 pad it to a multiple of 8)."""
    entries = (line.rsplit(" ", 1) for line in pipeline.read_lines(path))
    return {sym: int(count) for sym, count in entries}


def split_stats(tok_file: Path, raw_file: Path, vocab: set) -> dict:
    lines = pipeline.read_lines(tok_file)
    pieces = [l.split() for l in lines]
    n_pieces = sum(len(p) for p in pieces)
    oov = Counter(t for p in pieces for t in p if t not in vocab)
    with open(raw_file, encoding="utf-8") as f:
        words = sum(len(l.split()) for l in f)
    return {"lines": len(lines), "words": words, "pieces": n_pieces,
            "scored_tokens": n_pieces + len(lines),  # + one </s> per verse
            "max_pieces_per_line": max((len(p) for p in pieces), default=0),
            "oov_tokens": sum(oov.values()), "oov_types": dict(sorted(oov.items()))}


def audit_summary(bible: Path) -> dict:
    """The numbers of the corpus's audit and decontamination that concern this corpus."""
    report = json.loads((bible / "audit.json").read_text(encoding="utf-8"))
    out = {"train_pairs": report.get("train_pairs"), "splits": {}}
    for split, s in report["splits"].items():
        out["splits"][split] = {
            "pairs": s["pairs"],
            "exact_duplicates_target": s["exact_duplicates"]["target"],
            "near_duplicate_share_chrf70": s["near_duplicate_share"]["70"],
            "near_duplicate_share_chrf50": s["near_duplicate_share"]["50"]}
    decon = bible / "decontamination.json"
    if decon.exists():
        d = json.loads(decon.read_text(encoding="utf-8"))
        out["decontamination"] = {k: d[k] for k in
                                  ("duplicate_pairs_dropped", "near_duplicates_removed",
                                   "threshold_chrf") if k in d}
    return out


def corpus_stats(bible: Path, out: Path, held_out: dict) -> dict:
    vocab = read_dictionary(out / "bin" / "dict.txt")
    vocab_set = {sym for sym, count in vocab.items() if count > 0}
    return {
        "source": str(bible.resolve()), "language": LANG, "held_out_books": held_out,
        "spm_model_sha1": hashlib.sha1((bible / "spm.model").read_bytes()).hexdigest(),
        "dictionary": {"pieces": len(vocab_set), "padding_symbols": len(vocab) - len(vocab_set),
                       "fairseq_specials": 4, "entries": len(vocab) + 4},
        "splits": {s: split_stats(out / "tok" / f"{s}.{LANG}", out / "raw" / f"{s}.{LANG}",
                                  vocab_set) for s in SPLITS},
        "audit": audit_summary(bible),
    }


def readme_text(stats: dict) -> str:
    rows = "\n".join(
        f"| {s} | {e['lines']:,} | {e['words']:,} | {e['pieces']:,} | {e['scored_tokens']:,} | "
        f"{e['max_pieces_per_line']} | {e['oov_tokens']} |" for s, e in stats["splits"].items())
    a = stats["audit"]
    audit_rows = "\n".join(
        f"| {s} | {e['pairs']} | {e['exact_duplicates_target']} | "
        f"{100 * e['near_duplicate_share_chrf70']:.1f}% | "
        f"{100 * e['near_duplicate_share_chrf50']:.1f}% |" for s, e in a["splits"].items())
    decon = a.get("decontamination", {})
    held = stats["held_out_books"]
    return f"""# English Bible language-model corpus

Built by `python -m fairseq_shared.cli.bible_lm` from the clean Bible corpus
`{stats['source']}` (its English, World English Bible side; the split is the translation
corpus's own: valid = {', '.join(held['valid'])}, test = {', '.join(held['test'])}, train =
every other book). Tokenized with that corpus's sentencepiece model (sha1
`{stats['spm_model_sha1'][:12]}`), one verse per line; binarized with
`fairseq-preprocess --only-source`. Dictionary: the {stats['dictionary']['pieces']:,} pieces
of the English training side, fairseq's 4 specials and {stats['dictionary']['padding_symbols']}
padding symbols of count 0 (`madeupword`, to a multiple of 8): {stats['dictionary']['entries']:,}
entries.

| split | verses | words | pieces | scored tokens (pieces + `</s>`) | longest verse (pieces) | `<unk>` tokens |
|---|---|---|---|---|---|---|
{rows}

Held-out pieces that never occur in the English training side are `<unk>` for every model
(`oov_types` in `stats.json`).

The corpus's audit (`audit.json`, pairs of the translation corpus; target = this English side):

| split | verses | exact target duplicates in train | near-duplicates in train (chrF >= 70) | (chrF >= 50) |
|---|---|---|---|---|
{audit_rows}

Train decontamination done by the translation build: {decon.get('duplicate_pairs_dropped', '?')}
repeated pairs dropped, {decon.get('near_duplicates_removed', '?')} near-duplicates of valid/test
verses (chrF >= {decon.get('threshold_chrf', '?')}) removed (`decontamination.json`).

- `raw/SPLIT.en`, `raw/SPLIT.ids`: plain text and verse references; `tok/SPLIT.en`: pieces;
  `bin/`: fairseq-preprocess output.
"""


def build(bible, out) -> dict:
    """Build the LM corpus under ``out`` from the Bible corpus ``bible`` (restartable)."""
    bible, out = Path(bible), Path(out)
    need = [bible / "spm.model", bible / "audit.json"] + \
        [bible / "raw" / f"{s}.{x}" for s in SPLITS for x in (LANG, "ids")]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise FileNotFoundError(f"--bible {bible}: not a built Bible corpus, missing "
                                f"{missing[:3]} (build it with python -m "
                                "fairseq_shared.cli.bible --out DIR)")
    held_out = held_out_books(bible)
    check_split(bible, held_out)
    out.mkdir(parents=True, exist_ok=True)
    stages = pipeline.Stages(out)
    sources = {p: hashlib.sha1(p.read_bytes()).hexdigest() for p in need}

    def do_copy():
        (out / "raw").mkdir(exist_ok=True)
        for s in SPLITS:
            for x in (LANG, "ids"):
                pipeline.copy_file(bible / "raw" / f"{s}.{x}", out / "raw" / f"{s}.{x}")
        for name in AUDIT_FILES:
            if (bible / name).exists():
                pipeline.copy_file(bible / name, out / name)

    raw_files = [out / "raw" / f"{s}.{x}" for s in SPLITS for x in (LANG, "ids")]
    stages.run("copy", raw_files + [out / "audit.json"], do_copy,
               params={"sources": {str(k): v for k, v in sources.items()}})

    tok_files = [out / "tok" / f"{s}.{LANG}" for s in SPLITS]

    def do_encode():
        for s in SPLITS:
            n = pipeline.spm_encode_file(bible / "spm.model", out / "raw" / f"{s}.{LANG}",
                                         out / "tok" / f"{s}.{LANG}")
            log(f"encoded {s}.{LANG}: {n} lines")

    stages.run("encode", tok_files, do_encode, after=["copy"])

    bin_dir = out / "bin"

    def do_binarize():
        tmp = pipeline.fresh_dir_beside(bin_dir, "preprocess")
        try:
            pipeline.run_cmd(preprocess_command(out / "tok", tmp))
        except BaseException:
            pipeline.remove(tmp)
            raise
        pipeline.replace_dir(tmp, bin_dir)

    stages.run("binarize", [bin_dir / "dict.txt"] + [bin_dir / f"{s}.bin" for s in SPLITS],
               do_binarize, after=["encode"])

    stats = corpus_stats(bible, out, held_out)
    pipeline.write_text(out / "stats.json", json.dumps(stats, indent=1) + "\n")
    pipeline.write_text(out / "README.md", readme_text(stats))
    log("LM corpus ready in {}: {}".format(out, ", ".join(
        f"{s} {e['lines']} verses / {e['scored_tokens']} tokens"
        for s, e in stats["splits"].items())))
    return stats
