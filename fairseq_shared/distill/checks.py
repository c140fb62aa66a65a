"""The distillation's input checks (:mod:`fairseq_shared.distill.run`): each bad input is one
:class:`DistillError` line naming the flag or file and what is allowed, raised before any
decoding.

* :func:`check_settings`: the decoding and shard settings in range.
* :func:`check_output`: ``--out`` neither holds an input (a teacher checkpoint, the corpus)
  nor anything but this distillation's own files (another teacher's, other settings', or
  files that are no distillation's).
* :func:`check_dictionaries`: the corpus's dictionaries are the ones each teacher was trained
  with (the files its training directory still holds, and its embedding rows).
"""

import hashlib
import json
import math
import os
from typing import Dict, List

from fairseq_shared.errors import FairseqSharedError

#: What a distillation writes into ``--out``; anything else there is refused, but for hidden
#: names (the temporaries of atomic writes and of the teacher's export).
OWN_FILES = ("state.json", "manifest.json", "shards", "text", "bin", "bin.tmp", "teacher_export")


class DistillError(FairseqSharedError):
    """Bad input to the distillation; the message names the flag or file and what is allowed."""


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_settings(beam: int, lenpen: float, max_len_a: float, max_len_b: int, batch_size: int,
                   shard_size: int, check_sentences: int) -> None:
    checks = [
        ("--beam", beam, beam >= 1, "an integer >= 1"),
        ("--lenpen", lenpen, math.isfinite(lenpen), "a finite number"),
        ("--max-len-a", max_len_a, math.isfinite(max_len_a) and max_len_a >= 0,
         "a finite number >= 0"),
        ("--max-len-b", max_len_b, max_len_b >= 1, "an integer >= 1"),
        ("--batch-size", batch_size, batch_size >= 1, "an integer >= 1"),
        ("--shard-size", shard_size, shard_size >= 1, "an integer >= 1"),
        ("--check-sentences", check_sentences, check_sentences >= 1, "an integer >= 1"),
    ]
    for flag, value, ok, allowed in checks:
        if not ok:
            raise DistillError(f"{flag} {value}: must be {allowed}")


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def check_output(out: str, inputs: Dict[str, str], state: Dict) -> None:
    """Refuse an ``out`` that holds one of ``inputs`` ({what: path}), or files of another
    distillation (its ``state.json`` differs from ``state`` in teacher or settings), or
    files that are not a distillation's."""
    for what, path in inputs.items():
        if _inside(path, out):
            raise DistillError(f"--out {out} holds the input {what} {path}; write the "
                               "distillation to another directory")
    if not os.path.isdir(out):
        return
    found = sorted(os.listdir(out))
    foreign = [n for n in found if n not in OWN_FILES and not n.startswith(".")]
    if foreign:
        raise DistillError(f"--out {out} holds files that are not a distillation's "
                           f"({', '.join(foreign[:3])}); use a new or empty directory")
    path = os.path.join(out, "state.json")
    if not os.path.exists(path):
        if found:
            raise DistillError(f"--out {out} holds a distillation's files without its "
                               "state.json (not resumable); remove it or use another directory")
        return
    with open(path) as f:
        earlier = json.load(f)
    if earlier.get("teachers") != state["teachers"]:
        theirs = ", ".join(f"{t['path']} (sha256 {t['sha256'][:12]})"
                           for t in earlier.get("teachers", []))
        raise DistillError(f"--out {out} holds another teacher's distillation ({theirs}); "
                           "use another directory for this teacher")
    changed = sorted(k for k in state if k != "teachers" and earlier.get(k) != state[k])
    if changed:
        was = ", ".join(f"{k} {earlier.get(k)!r}" for k in changed)
        raise DistillError(f"--out {out} holds a distillation of this teacher with other "
                           f"settings ({was}); use another directory or the same settings")


def _symbols(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").rsplit(" ", 1)[0] for line in f if line.strip()]


def check_dictionaries(teacher: str, trained_on: str, corpus_bin: str, sizes: Dict[str, int],
                       model_state: Dict) -> None:
    """Each dictionary of ``corpus_bin`` ({file name: symbols as the task loaded it}) equals
    the one in ``trained_on`` (the teacher's training data directory, when it still exists),
    and the teacher's embeddings have one row per symbol."""
    names = list(sizes)
    for name in names:
        ours = os.path.join(corpus_bin, name)
        if not os.path.exists(ours):
            raise DistillError(f"--data {corpus_bin}: no {name} (the teacher {teacher} needs "
                               "the dictionaries of the corpus it was trained on)")
        theirs = os.path.join(str(trained_on or ""), name)
        if trained_on and os.path.exists(theirs) and not same_content(ours, theirs):
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
