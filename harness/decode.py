"""Decoding: the main job's models in one interleaved timing run (cached), the corpus's lookup
baseline on the same sentences, and a run's test set decoded once and scored."""

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional

from harness.corpus import corpus_paths
from harness.queue import item_id, read_json, write_result

def decode_args(budget: Dict, subset: str = "test") -> List[str]:
    """fairseq-generate's flags for a budget's (or the frontier's) decoding settings."""
    args = ["--beam", str(budget["beam"]), "--lenpen", str(budget["lenpen"]),
            "--batch-size", str(budget["batch_size"]),
            "--max-len-a", str(budget["max_len_a"]), "--max-len-b", str(budget["max_len_b"]),
            "--gen-subset", subset]
    if budget.get("device", "cpu") == "cpu":
        args += ["--cpu"]
    return args


def decode_all(ckpts: Dict[str, str], budget: Dict, data: str, out: str, progress) -> Dict:
    """One interleaved timing run over the checkpoints ``{name: path}`` (cached by a key over
    them and the decode settings), the report written to ``<out>/decode/``."""
    from fairseq_shared import timing

    settings = {k: budget[k] for k in ("beam", "lenpen", "batch_size", "subset", "repeats",
                                       "warmup_passes", "warmup_batches", "max_len_a",
                                       "max_len_b", "decode_threads", "device")}
    key_src = json.dumps({"settings": settings, "ckpts": {
        n: [p, os.path.getmtime(p), os.path.getsize(p)] for n, p in ckpts.items()}}, sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    ddir = os.path.join(out, "decode")
    done = Path(ddir) / "done.json"
    if (read_json(done) or {}).get("key") == key:
        progress(f"[decode] up to date ({ddir}); skipped")
        return json.loads((Path(ddir) / "results.json").read_text())
    progress(f"[decode] {len(ckpts)} models, {budget['warmup_passes']} warm-up + "
             f"{budget['repeats']} timed passes each, interleaved; subset: "
             f"{budget['subset'] or 'all'}")
    baseline = "vanilla" if "vanilla" in ckpts else next(iter(ckpts))
    report = timing.benchmark(
        ckpts, data, decode_args(budget), baseline=baseline, warmup=budget["warmup_passes"],
        warmup_batches=budget["warmup_batches"], repeats=budget["repeats"],
        subset=budget["subset"], threads=budget["decode_threads"], progress=progress)
    timing.write_report(report, ddir)
    write_result(done, {"key": key})
    return report.to_json()


def heldout_baseline(data: str, budget: Dict, decode: Optional[Dict], out: str,
                     rows: List[Dict]) -> Optional[Dict]:
    """The corpus's lookup baseline on the decoded test sentences (None without an audit).
    Where those sentences include near-duplicates of training data, each row also gets its
    BLEU/chrF on the near-duplicate-free rest (``bleu_clean``, ``chrf_clean``)."""
    from fairseq_shared import timing
    from fairseq_shared.data import audit

    _, _, tgt, _ = corpus_paths(data)
    refs_path = os.path.join(data, "raw", f"test.{tgt}")
    if not os.path.exists(refs_path):
        return None
    references = audit.read_lines(refs_path)
    ids = timing.select_ids(len(references), budget.get("subset"))
    lookup = audit.heldout_baseline(data, ids, "test", tgt)
    if lookup and lookup["near_duplicate_positions"] and decode:
        refs = [references[i] for i in ids]  # the file read once, not once per sentence
        for r in rows:
            hyp = os.path.join(out, "decode", f"hyp.{r['name']}.txt")
            if os.path.exists(hyp):
                clean = audit.score_without(audit.read_lines(hyp), refs,
                                            lookup["near_duplicate_positions"])
                r["bleu_clean"], r["chrf_clean"] = clean["bleu"], clean["chrf"]
    return lookup


def decode_test(checkpoint: str, data: str, budget: Dict, label: str, hyp_path: Path,
                progress=print) -> Dict:
    """Decode the whole test set once with ``checkpoint``; write the detokenized hypotheses
    to ``hyp_path``; returns sacreBLEU's BLEU/chrF (with signatures) and the decoding report."""
    from fairseq_shared import timing
    from fairseq_shared.scoring import score

    report = timing.benchmark({label: checkpoint}, data, decode_args(budget), warmup=0,
                              repeats=1, threads=budget["decode_threads"], progress=progress)
    res = report.models[0]
    hyp_path.parent.mkdir(parents=True, exist_ok=True)
    hyp_path.write_text("".join(h + "\n" for h in res.hypotheses), encoding="utf-8")
    scored = score(res.hypotheses, report.references)
    return {**{k: scored[k] for k in ("bleu", "chrf", "bleu_signature", "chrf_signature")},
            "sentences": scored["n"],
            "decode_tokens_per_s_single_pass": res.summary().get("tokens_per_s_median"),
            "decode_settings": report.settings}


def bleu_evaluation(data: str, budget: Dict, results: str, name: str, seed: int,
                    progress=print, checkpoint: Optional[str] = None, hyps: str = "") -> Callable:
    """The ``evaluate`` hook of translation runs: the whole test set decoded once from
    ``checkpoint`` (default the run's last), hypotheses written to
    ``RESULTS/hyps/<name>_s<seed><hyps>.<tgt>``; BLEU/chrF with signatures."""
    def evaluate(run, result: Dict) -> Dict:
        tgt = corpus_paths(data)[2]
        hyp_path = Path(results) / "hyps" / f"{item_id(name, seed)}{hyps}.{tgt}"
        progress(f"[decode] {item_id(name, seed)}: decoding the test set")
        test = decode_test(checkpoint or run.checkpoint, data, budget, name, hyp_path, progress)
        settings = test.pop("decode_settings")
        return {"test": {**test, "hypotheses": str(hyp_path.relative_to(results))},
                "decode_settings": settings}
    return evaluate
