"""The evidence runs: the papers' comparisons on a clean split, one committed file per run; a
declaration on the run queue (:mod:`fairseq_shared.experiments.queue`).

Each item of :data:`QUEUE` is one configuration of :data:`configs.CONFIGS` trained with one
seed under one budget (default ``evidence``). A worker trains it (restartable), decodes the
whole test set once, and writes at once

* ``RESULTS/runs/<name>_s<seed>.json``: parameters, updates, training seconds, the learning
  curve (valid loss every ``save_interval_updates`` updates, with training seconds), BLEU and
  chrF on the test set, the exact training and decoding settings;
* ``RESULTS/hyps/<name>_s<seed>.<tgt>``: the detokenized hypotheses (for paired tests).

:mod:`fairseq_shared.experiments.evidence_report` rebuilds every table and plot from the
committed run files only.
"""

import functools
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_shared.experiments import queue
from fairseq_shared.experiments.configs import CONFIGS, load_budget, select_configs
from fairseq_shared.experiments.corpus import corpus_paths
from fairseq_shared.experiments.decode import decode_args
from fairseq_shared.experiments.queue import item_id
from fairseq_shared.experiments.run_record import record_run
from fairseq_shared.experiments.runs import make_plan

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
    return queue.parse_queue(text, QUEUE, sorted(c["name"] for c in CONFIGS))


def plan_run(config: Dict, seed: int, data: str, work: str, budget: Dict, progress=print):
    """The :class:`~fairseq_shared.experiments.runs.Run` of ``config`` with ``seed``, under
    ``WORK/runs_s<seed>/<name>`` (its parameters counted)."""
    return make_plan([config], budget, data, os.path.join(work, f"out_s{seed}"), log=progress,
                     runs_dir=os.path.join(work, f"runs_s{seed}"))[0]


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


def bleu_evaluation(data: str, budget: Dict, results: str, name: str, seed: int,
                    progress=print, checkpoint: Optional[str] = None, hyps: str = "") -> callable:
    """The ``evaluate`` hook of translation runs: the whole test set decoded once from
    ``checkpoint`` (default the run's last), hypotheses written to
    ``RESULTS/hyps/<name>_s<seed><hyps>.<tgt>``; BLEU/chrF with signatures."""
    def evaluate(run, result: Dict) -> Dict:
        tgt = corpus_paths(data)[2]
        hyp_path = Path(results) / "hyps" / f"{item_id(name, seed)}{hyps}.{tgt}"
        progress(f"[evidence] {item_id(name, seed)}: decoding the test set")
        test = decode_test(checkpoint or run.checkpoint, data, budget, name, hyp_path, progress)
        settings = test.pop("decode_settings")
        return {"test": {**test, "hypotheses": str(hyp_path.relative_to(results))},
                "decode_settings": settings}
    return evaluate


def run_item(name: str, seed: int, data: str, work: str, results: str,
             budget_name: str = "evidence", overrides: Sequence[str] = (), progress=print,
             config: Optional[Dict] = None) -> Dict:
    """Train (or finish) one configuration (of :data:`CONFIGS`, or ``config``) with one seed,
    decode the test set and write its hypotheses; returns the result dict (the queue writes
    it to :func:`result_path`)."""
    budget = load_budget(budget_name, [*overrides, f"seed={seed}"])
    config = config or select_configs(CONFIGS, name, None)[0]
    run = plan_run(config, seed, data, work, budget, progress)
    item = queue.Item(name, seed)
    result = record_run(run, item, config.get("label", name),
                        bleu_evaluation(data, budget, results, name, seed, progress), progress)
    result.update({"tables": config.get("tables", []), "decoder_N": run.dec_N,
                   "data": os.path.abspath(data), "run_dir": os.path.abspath(run.dir)})
    progress(f"[evidence] {item.id}: {result['updates']} updates, valid loss "
             f"{result['valid_loss']}, test BLEU {result['test']['bleu']:.2f} chrF "
             f"{result['test']['chrf']:.2f}")
    return result


#: what :func:`snapshot_corpus` copies into ``RESULTS/corpus/``: the tables read the references
#: and the lookup baseline from there; a worker with ``--commit`` commits them before its first
#: run (``queue_cli.main``), so the results are never committed without them.
CORPUS_FILES = ("test.ref", "audit.json", "audit.md", "lookup.test.hyp", "source.dict.txt",
                "target.dict.txt")
#: the files that bind results to one build of the corpus: the references they are scored
#: against and the dictionaries their models index (a rebuilt corpus with other pieces would
#: decode a committed model into other words, without an error)
PINNED_FILES = ("test.ref", "source.dict.txt", "target.dict.txt")


def corpus_files(results: str) -> List[Path]:
    """The corpus snapshot's files that exist (a suite's commits add them while uncommitted)."""
    return [p for p in (Path(results) / "corpus" / n for n in CORPUS_FILES) if p.exists()]


def evidence_commit(item: queue.Item, result: Dict, ctx: queue.Context) -> Tuple[List[Path], str]:
    """The files of a finished evidence run besides its result file, and the message."""
    hyps = [Path(ctx.results) / result["test"]["hypotheses"]] if "test" in result else []
    return hyps, (f"evidence: {item.id} finished (BLEU {result['test']['bleu']:.2f}, "
                  f"{result['updates']} updates)" if hyps else f"evidence: {item.id} finished")


SUITE = queue.Suite("evidence", run=queue.item_runner(run_item), commit_files=evidence_commit)
#: work_queue(items, data, work, results, budget, overrides=(), commit_repo=None, progress=print)
work_queue = functools.partial(queue.work_pairs, SUITE)


def corpus_sources(data: str) -> Dict[str, Path]:
    """``{snapshot name: the corpus's file}`` for :data:`CORPUS_FILES`."""
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
    return corpus_files(results)
