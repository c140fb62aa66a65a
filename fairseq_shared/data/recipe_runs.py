"""Training, checkpoint averaging and evaluation of a recipe (a :class:`~fairseq_shared.data.
recipes.Task`), with Takase & Kiyono's settings: ``python -m fairseq_shared.cli.recipes TASK
{train,average,evaluate}`` (``recipes/<task>/run.sh``). The data side (fetch, tokenize, BPE,
binarize) is :mod:`fairseq_shared.data.recipes`.
"""

import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path

from fairseq_shared import scoring
from fairseq_shared.data import pipeline
from fairseq_shared.data.pipeline import log, read_lines, write_lines
from fairseq_shared.fairseq_commands import fairseq_command

# Takase & Kiyono's optimisation settings, shared by every task.
TAKASE_KIYONO = (
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
    "--lr", "0.002", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "8000",
    "--warmup-init-lr", "1e-07", "--dropout", "0.3", "--weight-decay", "0.0",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--share-all-embeddings", "--max-update", "50000", "--save-interval-updates", "1000",
    "--keep-interval-updates", "10", "--no-epoch-checkpoints", "--log-format", "simple",
    "--log-interval", "100",
)


def train_command(task, work, environ=None):
    """The fairseq-train command line for ``task`` (list of strings)."""
    env = os.environ if environ is None else environ
    work = Path(work)
    save_dir = env.get("SAVE_DIR", str(work / "checkpoints"))
    cmd = fairseq_command("train", work / "bin", "--task", "translation",
                          "--source-lang", task.src, "--target-lang", task.tgt,
                          "--arch", env.get("ARCH", task.arch), "--save-dir", save_dir)
    cmd += list(TAKASE_KIYONO) + list(task.train_args)
    if task.prep == "spm":  # separate vocabularies: only decoder input/output share
        i = cmd.index("--share-all-embeddings")
        cmd[i] = "--share-decoder-input-output-embed"
    if env.get("MAX_TOKENS"):
        cmd += ["--max-tokens", env["MAX_TOKENS"]]
    if env.get("UPDATE_FREQ"):
        cmd += ["--update-freq", env["UPDATE_FREQ"]]
    if env.get("MAX_UPDATE"):
        cmd += ["--max-update", env["MAX_UPDATE"]]
    if int(env.get("GPUS", "1")) > 1:
        cmd += ["--distributed-world-size", env["GPUS"]]
    if env.get("CPU") == "1":
        cmd += ["--cpu"]
    cmd += shlex.split(env.get("TRAIN_ARGS", ""))
    return cmd


def train(task, work):
    cmd = train_command(task, work)
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    proc = pipeline.subprocess.run(cmd, env=pipeline.subprocess_env())
    if proc.returncode:
        raise SystemExit(proc.returncode)


def average(task, work, n=10):
    """Average the last ``n`` interval checkpoints into WORK/checkpoints/avg_last10.pt."""
    ckpt = Path(os.environ.get("SAVE_DIR", Path(work) / "checkpoints"))
    out = ckpt / f"avg_last{n}.pt"
    if importlib.util.find_spec("fairseq_shared.cli.average_checkpoints") is None:
        raise SystemExit("fairseq_shared.cli.average_checkpoints is not available")
    pipeline.run_cmd([sys.executable, "-m", "fairseq_shared.cli.average_checkpoints",
                      "--inputs", ckpt, "--num-update-checkpoints", n, "--output", out])
    return out


def default_checkpoint(work):
    ckpt = Path(os.environ.get("SAVE_DIR", Path(work) / "checkpoints"))
    avg = ckpt / "avg_last10.pt"
    return avg if avg.exists() else ckpt / "checkpoint_last.pt"


def generate_command(task, work, subset, lenpen, checkpoint):
    post = "sentencepiece" if task.prep == "spm" else "subword_nmt"
    return fairseq_command(
        "generate", Path(work) / "bin", "--task", "translation",
        "--source-lang", task.src, "--target-lang", task.tgt,
        "--path", checkpoint, "--gen-subset", subset,
        "--beam", "4", "--lenpen", lenpen, "--remove-bpe", post,
        "--max-tokens", os.environ.get("GEN_MAX_TOKENS", "8000"),
        "--required-batch-size-multiple", "1", *shlex.split(os.environ.get("GEN_ARGS", "")))


def postprocess_hypotheses(task, hyps):
    """Generate output (BPE already removed) -> detokenized text comparable to the refs."""
    if task.prep == "spm":
        return hyps
    return scoring.detokenize(hyps, task.tgt)


def evaluate(task, work, checkpoint=None):
    """Decode every test set (beam 4, the task's lenpen) and score with sacreBLEU and chrF."""
    work = Path(work)
    checkpoint = checkpoint or os.environ.get("CHECKPOINT") or default_checkpoint(work)
    subsets = json.loads((work / "bin" / "test_sets.json").read_text())
    out_dir = work / "eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, subset in subsets.items():
        lenpen = task.lenpen.get(name, 1.0)
        proc = pipeline.run_cmd(generate_command(task, work, subset, lenpen, checkpoint))
        pipeline.write_text(out_dir / f"{name}.generate.txt", proc.stdout)
        hyps = postprocess_hypotheses(task, scoring.extract_hypotheses(proc.stdout.splitlines()))
        write_lines(out_dir / f"{name}.hyp.{task.tgt}", hyps)
        refs = [read_lines(p) for p in sorted((work / "raw").glob(f"{name}.ref*.{task.tgt}"))]
        res = scoring.score(hyps, refs, lowercase=task.bleu_lowercase)
        res.update(lenpen=lenpen, checkpoint=str(checkpoint))
        results[name] = res
        log(f"{task.name} {name}: {res['bleu_verbose']} | chrF2 {res['chrf']}")
    pipeline.write_text(out_dir / "scores.json", json.dumps(results, indent=1))
    return results
