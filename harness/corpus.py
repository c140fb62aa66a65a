"""A prepared corpus's layout: the fairseq-preprocess directory, the language pair, whether
the dictionaries are joined; and its snapshot beside a suite's results (:func:`snapshot_corpus`),
which pins the build the results were made on."""

import os
import re
from pathlib import Path
from typing import Dict, List


def corpus_paths(data: str):
    """-> (bin_dir, src, tgt, joined). Data is the corpus root (with bin/) or a bin dir."""
    from fairseq_shared.timing import resolve_data

    bin_dir, _ = resolve_data(data)
    dicts = sorted(f for f in os.listdir(bin_dir) if re.fullmatch(r"dict\.[^.]+\.txt", f))
    pairs = sorted({m.group(1) for f in os.listdir(bin_dir)
                    for m in [re.fullmatch(r"train\.([^.]+-[^.]+)\.[^.]+\.bin", f)] if m})
    if not pairs:
        raise SystemExit(f"{bin_dir}: no fairseq-preprocess output (train.SRC-TGT.*.bin)")
    src, tgt = pairs[0].split("-")
    joined = len(dicts) == 2 and (Path(bin_dir, f"dict.{src}.txt").read_bytes()
                                  == Path(bin_dir, f"dict.{tgt}.txt").read_bytes())
    return bin_dir, src, tgt, joined


def corpus_ready(root: str) -> bool:
    """Whether ``root`` holds the prepared Bible corpus (spm.model, raw/, bin/ es-en)."""
    bin_dir = os.path.join(root, "bin")
    need = [os.path.join(root, "spm.model"), os.path.join(root, "raw", "test.en"),
            os.path.join(bin_dir, "dict.es.txt"), os.path.join(bin_dir, "test.es-en.en.bin"),
            os.path.join(bin_dir, "train.es-en.es.bin")]
    return all(os.path.exists(p) for p in need)


#: ``data`` values of a configuration: where its training split comes from.
TRAINING_DATA = ("raw", "distilled")


def training_bin(data: str, config_data: str = "raw") -> str:
    """The binarized directory a configuration trains on: the corpus's own, or with
    ``data: distilled`` the teacher's distilled corpus ``<corpus>/distilled/bin``
    (``python -m fairseq_shared.cli.distill`` writes it; docs/distill.md)."""
    from fairseq_shared.timing import resolve_data

    bin_dir, root = resolve_data(data)
    if config_data == "raw":
        return bin_dir
    if config_data != "distilled":
        raise SystemExit(f"configuration data: {config_data!r}; allowed: "
                         f"{', '.join(TRAINING_DATA)}")
    distilled = os.path.join(os.path.dirname(distilled_manifest(data)), "bin")
    if not os.path.exists(distilled_manifest(data)):
        raise SystemExit(f"{distilled}: no distilled corpus (a configuration with data: "
                         f"distilled trains on it); write it with python -m "
                         f"fairseq_shared.cli.distill --teacher CKPT --data {data}")
    return distilled


def distilled_manifest(data: str) -> str:
    """The manifest of the teacher's distilled corpus of ``data`` (present once it is written)."""
    from fairseq_shared.timing import resolve_data

    bin_dir, root = resolve_data(data)
    return os.path.join(root or os.path.dirname(bin_dir), "distilled", "manifest.json")


def pin_distilled(data: str, results: str) -> List[Path]:
    """Copy the distilled corpus's manifest to ``RESULTS/distilled/``, refusing a corpus whose
    targets differ from the one pinned there (another teacher, or a decode that came out
    otherwise on another machine): the seeds of a distilled row must share their data.
    -> the copied manifest, or nothing when ``data`` has no distilled corpus."""
    import json
    import shutil

    src, pinned = Path(distilled_manifest(data)), Path(results) / "distilled" / "manifest.json"
    if not src.exists():
        return []
    new = json.loads(src.read_text()).get("train_sha256")
    old = json.loads(pinned.read_text()).get("train_sha256") if pinned.exists() else None
    if old and new != old:
        raise SystemExit(f"--data {data}: the distilled corpus of {src} (train_sha256 {new}) "
                         f"differs from {pinned} ({old}), which the distilled rows in {results} "
                         "were trained on; use another --results directory, or move the "
                         "distilled corpus away to train raw rows only")
    pinned.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, pinned)
    return [pinned]


#: what :func:`snapshot_corpus` copies into ``RESULTS/corpus/``: the tables read the references
#: and the lookup baseline from there; a worker with ``--commit`` commits them before its first
#: run (``queue_cli.main``), so the results are never committed without them.
CORPUS_FILES = ("test.ref", "audit.json", "audit.md", "lookup.test.hyp", "source.dict.txt",
                "target.dict.txt")
#: the files that bind results to one build of the corpus: the references they are scored
#: against and the dictionaries their models index (a rebuilt corpus with other pieces would
#: decode a committed model into other words, without an error)
PINNED_FILES = ("test.ref", "source.dict.txt", "target.dict.txt")


def corpus_sources(data: str) -> Dict[str, Path]:
    bin_dir, src, tgt, _ = corpus_paths(data)
    root = Path(data)
    return dict(zip(CORPUS_FILES, (root / "raw" / f"test.{tgt}", root / "audit.json",
                                   root / "audit.md", root / f"lookup.test.{tgt}",
                                   Path(bin_dir) / f"dict.{src}.txt",
                                   Path(bin_dir) / f"dict.{tgt}.txt")))


def check_corpus(data: str, results: str) -> Dict[str, Path]:
    """Refuse ``data`` if it is another build of the corpus than the one ``results`` were made
    on (a pinned file of the snapshot differs); -> the corpus's files."""
    sources = corpus_sources(data)
    for name, src in sources.items():
        if not src.exists():
            raise SystemExit(f"{src} is missing: build the corpus with its audit first "
                             "(python -m fairseq_shared.cli.bible, or data.audit RAW_DIR)")
        pinned = Path(results) / "corpus" / name
        if name in PINNED_FILES and pinned.exists() and pinned.read_bytes() != src.read_bytes():
            raise SystemExit(f"--data {data}: {src} differs from {pinned}, which the results in "
                             f"{results} were made with; they belong to another build of the "
                             "corpus (use another --results directory, or the corpus they name)")
    return sources


def snapshot_corpus(data: str, results: str) -> List[Path]:
    """Copy the test references, the corpus audit (lookup baseline) and the dictionaries next
    to the results, so that the tables can be rebuilt from committed files and the committed
    models decoded with the dictionaries they were trained with; refuse another build of the
    corpus (:func:`check_corpus`). -> the snapshot's files."""
    import shutil

    dst = Path(results) / "corpus"
    dst.mkdir(parents=True, exist_ok=True)
    for name, src in check_corpus(data, results).items():
        shutil.copyfile(src, dst / name)
    return [dst / name for name in CORPUS_FILES] + pin_distilled(data, results)
