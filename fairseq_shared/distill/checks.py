"""The distillation's input checks (:mod:`fairseq_shared.distill.run`): each bad input is one
:class:`DistillError` line naming the flag or file and what is allowed, raised before any
decoding.

* :func:`check_settings`: the decoding, shard and thread settings in range.
* :func:`check_output`: ``--out`` neither holds an input (a teacher checkpoint, the corpus)
  nor anything but this distillation's own files (another teacher's, another corpus's, other
  settings', or files that are no distillation's). Teachers and corpus are compared by their
  sha256, not their paths, so that a moved ``--out`` (or teacher) resumes.
* :func:`locked`: the lock a run holds on its ``--out`` (a second run into it is refused).
* :func:`check_dictionaries`: the corpus's dictionaries are the ones each teacher was trained
  with (the files its training directory still holds, and its embedding rows).
"""

import contextlib
import json
import math
import os
import re
from typing import Dict, Iterator, List, Optional

from fairseq_shared.checkpoint_io import file_sha256
from fairseq_shared.errors import FairseqSharedError
from fairseq_shared.locks import held

#: What a distillation writes into ``--out``; anything else there is refused, but for hidden
#: names (the temporaries of atomic writes and of the teacher's export).
OWN_FILES = ("state.json", "manifest.json", "shards", "text", "bin", "bin.tmp", "teacher_export")
#: The lock a run holds on its ``--out`` (hidden: not one of the files above).
LOCK = ".lock"


class DistillError(FairseqSharedError):
    """Bad input to the distillation; the message names the flag or file and what is allowed."""


#: The files of a binarized corpus that a distillation reads (its dictionaries and splits).
CORPUS_FILES = re.compile(r"dict\..+\.txt|(train|valid|test)\d*\..+\.(bin|idx)")


def corpus_hashes(corpus_bin: str) -> Dict[str, str]:
    """``{name: sha256}`` of the binarized corpus's dictionaries and splits: what a
    distillation is of, whatever path the corpus has."""
    return {name: file_sha256(os.path.join(corpus_bin, name))
            for name in sorted(os.listdir(corpus_bin))
            if CORPUS_FILES.fullmatch(name) and os.path.isfile(os.path.join(corpus_bin, name))}


def check_settings(beam: int, lenpen: float, max_len_a: float, max_len_b: int, batch_size: int,
                   shard_size: int, check_sentences: int, threads: int = 1) -> None:
    checks = [
        ("--beam", beam, beam >= 1, "an integer >= 1"),
        ("--lenpen", lenpen, math.isfinite(lenpen), "a finite number"),
        ("--max-len-a", max_len_a, math.isfinite(max_len_a) and max_len_a >= 0,
         "a finite number >= 0"),
        ("--max-len-b", max_len_b, max_len_b >= 1, "an integer >= 1"),
        ("--batch-size", batch_size, batch_size >= 1, "an integer >= 1"),
        ("--shard-size", shard_size, shard_size >= 1, "an integer >= 1"),
        ("--check-sentences", check_sentences, check_sentences >= 1, "an integer >= 1"),
        ("--threads", threads, threads >= 1, "an integer >= 1"),
    ]
    for flag, value, ok, allowed in checks:
        if not ok:
            raise DistillError(f"{flag} {value}: must be {allowed}")


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def check_inputs(out: str, inputs: Dict[str, str]) -> None:
    """Refuse an ``out`` that holds one of ``inputs`` ({what: path})."""
    for what, path in inputs.items():
        if _inside(path, out):
            raise DistillError(f"--out {out} holds the input {what} {path}; write the "
                               "distillation to another directory")


def check_output(out: str, plan: Dict) -> Optional[Dict]:
    """The ``state.json`` of the distillation that ``out`` holds (None: ``out`` is new or
    empty, but for hidden names), refused when it is another teacher's (by sha256), another
    corpus's or of other settings, or when ``out`` holds files that are not a distillation's."""
    if not os.path.isdir(out):
        return None
    found = sorted(n for n in os.listdir(out) if not n.startswith("."))
    foreign = [n for n in found if n not in OWN_FILES]
    if foreign:
        raise DistillError(f"--out {out} holds files that are not a distillation's "
                           f"({', '.join(foreign[:3])}); use a new or empty directory")
    path = os.path.join(out, "state.json")
    if not os.path.exists(path):
        if found:
            raise DistillError(f"--out {out} holds a distillation's files without its "
                               "state.json (not resumable); remove it or use another directory")
        return None
    try:
        with open(path) as f:
            earlier = json.load(f)
        theirs = [t["sha256"] for t in earlier["teachers"]]
    except (ValueError, KeyError, TypeError) as e:
        raise DistillError(f"{path}: not a distillation's state ({type(e).__name__}); remove "
                           f"--out {out} or use another directory")
    if theirs != [t["sha256"] for t in plan["teachers"]]:
        named = ", ".join(f"{os.path.normpath(os.path.join(out, t.get('path', '?')))} "
                          f"(sha256 {t['sha256'][:12]})" for t in earlier["teachers"])
        raise DistillError(f"--out {out} holds another teacher's distillation ({named}); "
                           "use another directory for this teacher")
    corpus = earlier.get("corpus_sha256")
    if corpus is not None and corpus != plan["corpus_sha256"]:
        changed = sorted(n for n in set(corpus) | set(plan["corpus_sha256"])
                         if corpus.get(n) != plan["corpus_sha256"].get(n))
        raise DistillError(f"--out {out} holds a distillation of another corpus than --data "
                           f"{plan['corpus']} (or of it before it was rebuilt: "
                           f"{', '.join(changed[:3])} differ); use another directory")
    changed = sorted(k for k in plan if k not in ("teachers", "corpus", "corpus_sha256")
                     and earlier.get(k) != plan[k])
    if changed:
        was = ", ".join(f"{k} {earlier.get(k)!r}" for k in changed)
        raise DistillError(f"--out {out} holds a distillation of this teacher with other "
                           f"settings ({was}); use another directory or the same settings")
    return earlier


@contextlib.contextmanager
def locked(out: str) -> Iterator[None]:
    """Hold the lock ``out/.lock`` (created with ``out``), or raise :class:`DistillError`
    when another run holds it (:func:`fairseq_shared.locks.held`)."""
    path = os.path.join(out, LOCK)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise DistillError(f"--out {out}: cannot create it: {e.strerror or e}")
    with held(path, f"--out {out}", f"--out {out}: another distill run is writing into it (it "
              f"holds {path}); wait for it to finish, or use another directory", DistillError):
        yield


def _symbols(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").rsplit(" ", 1)[0] for line in f if line.strip()]


def check_dictionaries(teacher: str, trained_on: str, corpus_bin: str, sizes: Dict[str, int],
                       model_state: Dict, given: bool = False) -> None:
    """Each dictionary of ``corpus_bin`` ({file name: symbols as the task loaded it}) equals
    the one in ``trained_on`` (the teacher's training data directory; ``given``: named by
    ``--trained-on``), and the teacher's embeddings have one row per symbol. A dictionary
    that ``trained_on`` no longer holds is refused: another corpus's dictionary of the same
    size would pass the row count and distil garbage."""
    names = list(sizes)
    for name in names:
        ours = os.path.join(corpus_bin, name)
        if not os.path.exists(ours):
            raise DistillError(f"--data {corpus_bin}: no {name} (the teacher {teacher} needs "
                               "the dictionaries of the corpus it was trained on)")
        theirs = os.path.join(str(trained_on or ""), name)
        if not os.path.isfile(theirs):
            if given:
                raise DistillError(f"--trained-on {trained_on}: no {name} (the directory of "
                                   f"the dictionaries {teacher} was trained with)")
            raise DistillError(
                f"{teacher}: its training data directory {trained_on or '(none recorded)'} no "
                f"longer holds {name}, so --data {corpus_bin}'s cannot be checked against it; "
                "pass --trained-on DIR, the directory that holds its dictionaries now (--data's "
                "own, if it is the teacher's corpus)")
        if not same_content(ours, theirs):
            a, b = _symbols(ours), _symbols(theirs)
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            raise DistillError(
                f"--data {corpus_bin}: {name} differs from the dictionary {theirs} that "
                f"{teacher} was trained with ({len(a)} against {len(b)} symbols, first "
                f"difference at line {first + 1}); distil with the corpus of the teacher")
    rows = {key: value.shape[0] for key, value in model_state.items()
            if key.endswith("embed_tokens.weight")}
    for key, n in rows.items():
        name = names[0] if key.startswith("encoder") else names[-1]
        if n != sizes[name]:
            raise DistillError(
                f"--data {corpus_bin}: {name} has {sizes[name]} symbols (specials included) but "
                f"{teacher}'s {key} has {n} rows: the dictionary differs from the one the "
                "teacher was trained with; distil with the corpus of the teacher")


def same_content(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()
