"""Pieces shared by the Bible corpus and the recipes: restartable stages, sentencepiece,
fairseq-preprocess, line-oriented file helpers.

A stage is skipped when its done-marker exists, records the same parameters, and all its
outputs exist; otherwise the marker is removed, the stage runs, its outputs are checked and the
marker is written last, so a run killed in the middle of a stage redoes that stage only.
"""

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path


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
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps({"fingerprint": fp, "params": params,
                                   "seconds": round(time.time() - t0, 1)}, default=str))
        tmp.replace(marker)
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
    """Write atomically (tmp + rename) so a killed run leaves no half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line.replace("\n", " ") + "\n")
    tmp.replace(path)


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


# --------------------------------------------------------------------------- sentencepiece

def train_sentencepiece(inputs, model_prefix, vocab_size, model_type="unigram",
                        character_coverage=1.0, seed_sentences=2_000_000, threads=1):
    """Joint sentencepiece model over ``inputs``; writes MODEL_PREFIX.model/.vocab."""
    import sentencepiece as spm

    model_prefix = Path(model_prefix)
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp_prefix = model_prefix.with_name(model_prefix.name + ".tmp")
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
    """``fairseq-preprocess`` (one worker) into ``destdir``, written to a temp dir first."""
    destdir = Path(destdir)
    tmp = destdir.with_name(destdir.name + ".tmp")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
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
    if destdir.exists():
        import shutil

        shutil.rmtree(destdir)
    tmp.replace(destdir)
