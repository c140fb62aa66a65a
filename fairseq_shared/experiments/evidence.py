"""The evidence runs: the papers' comparisons on a clean split, one committed file per run.

Each item of :data:`QUEUE` is one configuration of :data:`configs.CONFIGS` trained with one
seed under one budget (default ``evidence``). A worker takes the next item that is neither
finished nor claimed by another worker, trains it (restartable, through
:func:`training.train`), decodes the whole test set once, and writes at once

* ``RESULTS/runs/<name>_s<seed>.json``: parameters, updates, training seconds, the learning
  curve (valid loss every ``save_interval_updates`` updates, with training seconds), BLEU and
  chrF on the test set, the exact training and decoding settings;
* ``RESULTS/hyps/<name>_s<seed>.<tgt>``: the detokenized hypotheses (for paired tests).

Several workers can run side by side (one per core); claims are files under
``WORK/claims``. :mod:`fairseq_shared.experiments.evidence_report` rebuilds every table and
plot from the committed run files only.
"""

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_shared.experiments.configs import CONFIGS, load_budget, select_configs
from fairseq_shared.experiments.corpus import corpus_paths
from fairseq_shared.experiments.cpu_clock import cpu_per_update, cumulative_cpu, read_cpu_log
from fairseq_shared.experiments.decode import decode_args
from fairseq_shared.experiments.runs import make_plan
from fairseq_shared.experiments.training import log_records, train

# Takase & Kiyono's core rows with 2 seeds first, then the rest (see the evidence issue).
QUEUE: List[Tuple[str, int]] = [
    ("vanilla", 1), ("cycle_rev_2L", 1), ("vanilla_2L", 1),
    ("vanilla", 2), ("cycle_rev_2L", 2), ("vanilla_2L", 2),
    ("sequence_2L", 1), ("cycle_2L", 1), ("universal", 1),
    ("attn_shared", 1), ("ffn_shared", 1),
    ("vanilla_dec2L", 1), ("san_dec2L", 1), ("vanilla_dec2L", 2), ("san_dec2L", 2),
]


def parse_queue(text: Optional[str]) -> List[Tuple[str, int]]:
    """``name:seed,name:seed`` -> items; None -> :data:`QUEUE`."""
    if not text:
        return list(QUEUE)
    items = []
    known = {c["name"] for c in CONFIGS}
    for part in text.split(","):
        name, _, seed = part.strip().partition(":")
        if name not in known:
            raise SystemExit(f"--queue: unknown configuration '{name}'; known: "
                             f"{', '.join(sorted(known))}")
        if not seed.isdigit():
            raise SystemExit(f"--queue: '{part}' needs a seed, as in {name}:1")
        items.append((name, int(seed)))
    return items


def item_id(name: str, seed: int) -> str:
    return f"{name}_s{seed}"


def result_path(results: str, name: str, seed: int) -> Path:
    return Path(results) / "runs" / f"{item_id(name, seed)}.json"


# ---------------------------------------------------------------------------- claims
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(work: str, name: str, seed: int) -> bool:
    """Atomically claim an item for this process; a claim of a dead process is taken over."""
    path = Path(work) / "claims" / item_id(name, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(path.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and _alive(pid):
                return False
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def release(work: str, name: str, seed: int) -> None:
    (Path(work) / "claims" / item_id(name, seed)).unlink(missing_ok=True)


# ---------------------------------------------------------------------------- one run
def learning_curve(log_path: str, cpu_costs: Sequence[float] = ()) -> List[Dict]:
    """Valid loss at every validation, with the training seconds spent up to that update.

    fairseq's ``train_inner`` lines carry ``train_wall``, the seconds of their own logging
    interval (its cumulative ``wall`` restarts on resume), so the training seconds at update u
    are the sum over the intervals that end at or before u; an interval logged twice (a killed
    attempt that was resumed from an earlier checkpoint) counts once, with its last value.
    ``cpu_costs`` (:func:`~fairseq_shared.experiments.cpu_clock.cpu_per_update`) adds the
    CPU seconds spent up to each point (``train_cpu_seconds``)."""
    intervals, points = {}, {}
    for kind, rec in log_records(log_path):
        if kind == "train_inner" and "train_wall" in rec:
            intervals[int(float(rec["num_updates"]))] = float(rec["train_wall"])
        elif kind == "valid":
            point = {"update": int(float(rec["valid_num_updates"])),
                     "valid_loss": float(rec["valid_loss"])}
            if "valid_nll_loss" in rec:
                point["valid_nll_loss"] = float(rec["valid_nll_loss"])
            points[point["update"]] = point
    for u, point in points.items():
        point["train_seconds"] = sum(s for end, s in intervals.items() if end <= u)
        if len(cpu_costs) >= u:
            point["train_cpu_seconds"] = round(cumulative_cpu(cpu_costs, u), 2)
    return [points[u] for u in sorted(points)]


def decode_test(checkpoint: str, data: str, budget: Dict, label: str, hyp_path: Path,
                progress=print) -> Dict:
    """Decode the whole test set once with ``checkpoint``; write the detokenized hypotheses
    to ``hyp_path``; returns sacreBLEU's BLEU/chrF (with signatures) and the decoding report."""
    from fairseq_shared import timing
    from fairseq_shared.data.scoring import score

    report = timing.benchmark({label: checkpoint}, data, decode_args(budget),
                              warmup=0, repeats=1, threads=budget["decode_threads"],
                              progress=progress)
    res = report.models[0]
    hyp_path.parent.mkdir(parents=True, exist_ok=True)
    hyp_path.write_text("".join(h + "\n" for h in res.hypotheses), encoding="utf-8")
    scored = score(res.hypotheses, report.references)
    return {"bleu": scored["bleu"], "chrf": scored["chrf"],
            "bleu_signature": scored["bleu_signature"],
            "chrf_signature": scored["chrf_signature"], "sentences": scored["n"],
            "decode_tokens_per_s_single_pass": res.summary().get("tokens_per_s_median"),
            "decode_settings": report.settings}


def write_result(path: Path, result: Dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def run_item(name: str, seed: int, data: str, work: str, results: str,
             budget_name: str = "evidence", overrides: Sequence[str] = (), progress=print,
             config: Optional[Dict] = None) -> Dict:
    """Train (or finish) one configuration (of :data:`CONFIGS`, or ``config``) with one seed,
    decode the test set, write its result file and hypotheses; returns the result dict."""
    budget = load_budget(budget_name, [*overrides, f"seed={seed}"])
    config = config or select_configs(CONFIGS, name, None)[0]
    out = os.path.join(work, f"out_s{seed}")
    run = make_plan([config], budget, data, out, log=progress,
                              runs_dir=os.path.join(work, f"runs_s{seed}"))[0]
    if run.skip_reason:
        raise RuntimeError(f"{item_id(name, seed)}: {run.skip_reason}")
    t0 = time.time()
    if run.state() != "done":
        train(run, progress, 1, 1, t0)
    info = run.done_info()
    progress(f"[evidence] {item_id(name, seed)}: decoding the test set")
    _, _, tgt, _ = corpus_paths(data)
    hyp_path = Path(results) / "hyps" / f"{item_id(name, seed)}.{tgt}"
    test = decode_test(run.checkpoint, data, budget, name, hyp_path, progress)
    decode_settings = test.pop("decode_settings")
    costs, estimated = cpu_per_update(read_cpu_log(os.path.join(run.dir, "cpu.jsonl")),
                                      info["updates"])
    result = {
        "name": name, "seed": seed, "label": config.get("label", name),
        "tables": config.get("tables", []), "arch": run.arch, "strategy": run.strategy,
        "scope": run.scope, "N": run.N, "M": run.M,
        "decoder_N": getattr(run, "dec_N", run.N), "params": run.params,
        "updates": info["updates"], "training_seconds": info["training_seconds"],
        "seconds_per_update": info["training_seconds"] / max(info["updates"], 1),
        "train_wps": info.get("train_wps"),
        # CPU seconds of the training process tree: not inflated by other jobs (cpu_clock)
        "training_cpu_seconds": round(sum(costs), 1) if costs else None,
        "cpu_seconds_per_update": round(sum(costs) / len(costs), 4) if costs else None,
        "cpu_estimated_updates": estimated,
        "valid_loss": info.get("valid_loss"), "valid_nll_loss": info.get("valid_nll_loss"),
        "curve": learning_curve(os.path.join(run.dir, "train.log"), costs),
        "test": {**test, "hypotheses": str(hyp_path.relative_to(results))},
        "budget": {k: v for k, v in budget.items()},
        "train_command": run.train_command()[1:],
        "decode_settings": decode_settings,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "data": os.path.abspath(data),
        "run_dir": os.path.abspath(run.dir),
    }
    path = result_path(results, name, seed)
    write_result(path, result)
    progress(f"[evidence] {item_id(name, seed)}: {info['updates']} updates, valid loss "
             f"{result['valid_loss']}, test BLEU {test['bleu']:.2f} chrF "
             f"{test['chrf']:.2f} -> {path}")
    return result


def commit(paths: Sequence[Path], message: str, repo: str, tries: int = 10) -> bool:
    """``git commit`` exactly these paths (other work in the tree is left alone)."""
    rel = [os.path.relpath(os.path.abspath(p), repo) for p in paths]
    for _ in range(tries):
        add = subprocess.run(["git", "-C", repo, "add", "--", *rel], capture_output=True)
        done = add.returncode == 0 and subprocess.run(
            ["git", "-C", repo, "commit", "-q", "-m", message, "--", *rel],
            capture_output=True).returncode == 0
        if done:
            return True
        time.sleep(3)  # another process holds the index lock
    return False


def results_repository(results: str) -> str:
    """The git repository that holds ``results`` (for ``--commit``)."""
    os.makedirs(results, exist_ok=True)
    top = subprocess.run(["git", "-C", results, "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True)
    if top.returncode != 0:
        raise SystemExit(f"--commit: {results} is not inside a git repository")
    return top.stdout.strip()


def evidence_commit(results: str, result: Dict) -> Tuple[List[Path], str]:
    """The files of a finished evidence run and the commit message."""
    name, seed = result["name"], result["seed"]
    return ([result_path(results, name, seed), Path(results) / result["test"]["hypotheses"]],
            f"evidence: {item_id(name, seed)} finished "
            f"(BLEU {result['test']['bleu']:.2f}, {result['updates']} updates)")


def work_queue(items: Sequence[Tuple[str, int]], data: str, work: str, results: str,
               budget_name: str = "evidence", overrides: Sequence[str] = (),
               commit_repo: Optional[str] = None, progress=print,
               run=None, to_commit=evidence_commit, tag: str = "evidence") -> List[str]:
    """Run every unfinished, unclaimed item in order; returns the ids this worker finished.
    ``run`` (default :func:`run_item`) trains and scores one item with the same arguments;
    ``to_commit(results, result)`` names the files and message committed when it finishes."""
    run = run or run_item
    finished = []
    for name, seed in items:
        if result_path(results, name, seed).exists() or not claim(work, name, seed):
            continue
        try:
            result = run(name, seed, data, work, results, budget_name, overrides, progress)
        finally:
            release(work, name, seed)
        finished.append(item_id(name, seed))
        if commit_repo:
            paths, message = to_commit(results, result)
            ok = commit(paths, message, commit_repo)
            progress(f"[{tag}] {'committed' if ok else 'could not commit'} {item_id(name, seed)}")
    return finished


def snapshot_corpus(data: str, results: str) -> None:
    """Copy the test references and the corpus audit (lookup baseline) next to the results,
    so that the tables can be rebuilt from committed files; refuse a different test set."""
    import shutil

    _, _, tgt, _ = corpus_paths(data)
    root = Path(data)
    dst = Path(results) / "corpus"
    dst.mkdir(parents=True, exist_ok=True)
    ref = root / "raw" / f"test.{tgt}"
    if (dst / "test.ref").exists() and (dst / "test.ref").read_bytes() != ref.read_bytes():
        raise SystemExit(f"{dst / 'test.ref'} differs from {ref}: these results belong to "
                         "another corpus; use another --results directory")
    for src, name in ((ref, "test.ref"), (root / "audit.json", "audit.json"),
                      (root / "audit.md", "audit.md"), (root / f"lookup.test.{tgt}", "lookup.test.hyp")):
        if not src.exists():
            raise SystemExit(f"{src} is missing: build the corpus with its audit first "
                             "(python -m fairseq_shared.data.bible, or data.audit RAW_DIR)")
        shutil.copyfile(src, dst / name)
