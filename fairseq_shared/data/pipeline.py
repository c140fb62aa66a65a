"""Pieces shared by the Bible corpus and the recipes: restartable stages, sentencepiece,
fairseq-preprocess, line-oriented file helpers.

Every file is written under a fresh temporary name beside it and then renamed into place
(``write_text``, ``copy_file`` and :func:`write_lines` through ``checkpoint_io.atomic_write``; a
directory made by ``mkdir``, :func:`fresh_dir_beside`), so a killed run leaves the old file or
the new one, a symlink planted at a temporary name is never written through, and a full disk
names the path.

A stage is skipped when its done-marker exists, records the same parameters, and all its
outputs exist; otherwise the marker is removed, the stage runs, its outputs are checked and the
marker is written last, so a run killed in the middle of a stage redoes that stage only.
"""

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from fairseq_shared.checkpoint_io import atomic_write, copy_file, write_text  # noqa: F401 (the data builders' writers)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def subprocess_env(**extra):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_cmd(cmd, **kwargs):
    """Run a command (list), echoing it; raise with its output tail on failure."""
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd))
    kwargs.setdefault("env", subprocess_env())
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        tail = (proc.stdout[-3000:] + "\n" + proc.stderr[-3000:]).strip()
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc


def fingerprint(params):
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:16]


class Stages:
    """Restartable stages under ``out``; markers live in ``out/.stages/NAME.done``."""

    def __init__(self, out):
        self.out = Path(out)
        self.marker_dir = self.out / ".stages"
        self.fingerprints = {}

    def marker(self, name):
        return self.marker_dir / f"{name}.done"

    def run(self, name, outputs, fn, params=None, after=()):
        """Run ``fn()`` unless stage ``name`` is done with these ``params`` and ``outputs``.

        ``after`` names earlier stages whose fingerprints feed into this one, so redoing an
        upstream stage (e.g. with another vocabulary size) redoes its downstream stages.
        Returns True when the stage ran, False when it was skipped.
        """
        params = dict(params or {})
        params["_after"] = {a: self.fingerprints.get(a) for a in after}
        fp = fingerprint(params)
        self.fingerprints[name] = fp
        outputs = [Path(o) for o in outputs]
        marker = self.marker(name)
        if marker.exists():
            try:
                recorded = json.loads(marker.read_text()).get("fingerprint")
            except (OSError, ValueError):
                recorded = None
            missing = [str(o) for o in outputs if not _valid_output(o)]
            if recorded == fp and not missing:
                log(f"stage {name}: done already, skipping")
                return False
            why = "parameters or an earlier stage changed" if recorded != fp else f"missing {missing[:3]}"
            log(f"stage {name}: redoing ({why})")
        marker.unlink(missing_ok=True)
        log(f"stage {name}: start")
        t0 = time.time()
        fn()
        missing = [str(o) for o in outputs if not _valid_output(o)]
        if missing:
            raise RuntimeError(f"stage {name} did not produce {missing}")
        self.marker_dir.mkdir(parents=True, exist_ok=True)
        write_text(marker, json.dumps({"fingerprint": fp, "params": params,
                                       "seconds": round(time.time() - t0, 1)}, default=str))
        log(f"stage {name}: done in {time.time() - t0:.1f}s")
        return True


def _valid_output(path):
    path = Path(path)
    if path.is_dir():
        return any(path.iterdir())
    return path.is_file() and path.stat().st_size > 0


# --------------------------------------------------------------------------- text files

def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write_lines(path, lines):
    """One line per item of ``lines`` (a newline inside one becomes a space), through
    ``checkpoint_io.atomic_write``, streamed: a killed run leaves no half-written file."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)

    def write(f):
        for line in lines:
            f.write((line.replace("\n", " ") + "\n").encode("utf-8"))

    atomic_write(str(path), write)


def fresh_dir_beside(path, job):
    """A new empty directory beside ``path``, ``.NAME.JOB``, after removing what an
    interrupted run left there (a link is removed, never followed). ``mkdir`` creates it, so
    anything that takes the name meanwhile is an error, never written through; the name is
    fixed so that files that record their path (sentencepiece's model) come out the same."""
    path = Path(path)
    fresh = path.with_name(f".{path.name}.{job}")
    path.parent.mkdir(parents=True, exist_ok=True)
    remove(fresh)
    fresh.mkdir()
    return fresh


def remove(path):
    """Remove the file or directory ``path``, never following a link."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


# --------------------------------------------------------------------------- sentencepiece

def train_sentencepiece(inputs, model_prefix, vocab_size, model_type="unigram",
                        character_coverage=1.0, seed_sentences=2_000_000, threads=1):
    """Joint sentencepiece model over ``inputs``; writes MODEL_PREFIX.model/.vocab."""
    import sentencepiece as spm

    model_prefix = Path(model_prefix)
    tmp_dir = fresh_dir_beside(model_prefix, "spm")
    tmp_prefix = tmp_dir / model_prefix.name
    spm.SentencePieceTrainer.train(
        input=",".join(str(i) for i in inputs),
        model_prefix=str(tmp_prefix),
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=seed_sentences,
        shuffle_input_sentence=True,
        num_threads=threads,
        # fairseq adds its own <s> <pad> </s> <unk>; keep sentencepiece's specials out of the text.
        bos_id=-1, eos_id=-1, unk_id=0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    for ext in ("model", "vocab"):
        Path(f"{tmp_prefix}.{ext}").replace(f"{model_prefix}.{ext}")
    tmp_dir.rmdir()


def spm_encode_file(model, src, dst):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    lines = read_lines(src)
    write_lines(dst, (" ".join(sp.encode(line, out_type=str)) for line in lines))
    return len(lines)


# --------------------------------------------------------------------------- fairseq

class _DropNamespace:
    """Logging filter: drop the record that is fairseq's whole ``Namespace(...)`` dump."""

    def filter(self, record):
        return not str(record.msg).startswith("Namespace(")


def fairseq_preprocess(src, tgt, trainpref, destdir, validpref=None, testpref=None,
                       joined=True, srcdict=None, extra=(), in_process=True):
    """``fairseq-preprocess`` (one worker) into ``destdir``, written into a fresh directory
    beside it first (:func:`fresh_dir_beside`) that then replaces it; an ``OSError`` that
    names no file (a full disk) is raised naming ``destdir``."""
    destdir = Path(destdir)
    tmp = fresh_dir_beside(destdir, "preprocess")
    try:
        _preprocess(src, tgt, trainpref, tmp, validpref, testpref, joined, srcdict, extra,
                    in_process)
    except OSError as e:
        remove(tmp)
        if e.filename is not None:
            raise
        raise OSError(e.errno, f"{e.strerror or e} (fairseq-preprocess)", str(destdir)) from e
    except BaseException:
        remove(tmp)
        raise
    replace_dir(tmp, destdir)


def replace_dir(fresh, path):
    """Put the directory ``fresh`` (:func:`fresh_dir_beside`) in the place of ``path``."""
    remove(path)
    Path(fresh).replace(path)


def _preprocess(src, tgt, trainpref, tmp, validpref, testpref, joined, srcdict, extra,
                in_process):
    args = ["--source-lang", src, "--target-lang", tgt,
            "--trainpref", trainpref, "--destdir", tmp, "--workers", "1"]
    if validpref:
        args += ["--validpref", validpref]
    if testpref:
        if isinstance(testpref, (list, tuple)):  # several test sets -> test, test1, test2, ...
            testpref = ",".join(str(t) for t in testpref)
        args += ["--testpref", testpref]
    if srcdict:
        args += ["--srcdict", srcdict]
    if joined:
        args += ["--joined-dictionary"]
    args = [str(a) for a in args + list(extra)]
    if in_process:  # saves the ~5-10 s of importing fairseq in a fresh interpreter
        from fairseq import options
        from fairseq_cli import preprocess

        log("fairseq-preprocess " + " ".join(args))
        quiet = _DropNamespace()
        preprocess.logger.addFilter(quiet)  # its first line is the whole argument Namespace
        try:
            preprocess.main(options.get_preprocessing_parser().parse_args(args))
        finally:
            preprocess.logger.removeFilter(quiet)
    else:
        from fairseq_shared.fairseq_commands import fairseq_tool

        run_cmd(fairseq_tool("preprocess") + args)
