"""One trained run and its record: :func:`record_run`, the result keys every trained run shares
around a suite's ``evaluate`` hook, and :func:`run_item`, a run of a budget without milestones
(trained, its test set decoded once and scored)."""

import os
from typing import Callable, Dict, List, Sequence

from harness.configs import CONFIGS, load_budget, row_fields, select_configs
from harness.cpu_clock import cpu_per_update, read_cpu_log
from harness.decode import bleu_evaluation
from harness.queue import Item
from harness.runs import plan_run
from harness.training import checkpoint_progress, learning_curve, train, with_cpu


def train_run(run, ident: str, progress=print) -> Dict:
    """Train (or finish) ``run`` (restartable); returns its done.json content, and the run
    holds what it reached: its updates, and its curve (:func:`~harness.training.train`)."""
    if run.skip_reason:
        raise RuntimeError(f"{ident}: {run.skip_reason}")
    if run.state() != "done":
        return train(run, progress)  # which sets what the run holds
    info = run.done_info()
    progress(f"[train] {run.name}: already trained ({info['updates']} updates); skipped")
    run.updates, run.curve = int(info.get("checkpoint_updates", info["updates"])), None
    return info


def checkpoint_updates(run) -> int:
    """The updates ``run`` has trained: held by the run, read from its checkpoint only where
    training has not yet said (:func:`train_run`)."""
    if run.updates is None:
        run.updates = (checkpoint_progress(run.checkpoint)["updates"]
                       if os.path.exists(run.checkpoint) else 0)
    return run.updates


def run_curve(run) -> List[Dict]:
    """The validations of ``run``'s training log, held by the run: parsed once after each
    chunk of training."""
    if run.curve is None:
        run.curve = learning_curve(os.path.join(run.dir, "train.log"))
    return run.curve


def record_run(run, item: Item, label: str, evaluate: Callable[[object, Dict], Dict],
               progress=print) -> Dict:
    """Train (or finish) ``run``, evaluate it, and return its result: the keys every suite
    shares, then what ``evaluate(run, result)`` returns (it may also amend the curve)."""
    info = train_run(run, item.id, progress)
    costs, estimated = cpu_per_update(read_cpu_log(os.path.join(run.dir, "cpu.jsonl")),
                                      info["updates"])
    result = {"name": item.name, "seed": item.seed, "label": label, "arch": run.arch,
              "strategy": run.strategy, "scope": run.scope, "N": run.N, "M": run.M,
              "params": run.params, "updates": info["updates"],
              "training_seconds": info["training_seconds"],
              "seconds_per_update": info["training_seconds"] / max(info["updates"], 1),
              "train_wps": info.get("train_wps"),
              # CPU seconds of the training process tree: not inflated by other jobs (cpu_clock)
              "training_cpu_seconds": round(sum(costs), 1) if costs else None,
              "cpu_seconds_per_update": round(sum(costs) / len(costs), 4) if costs else None,
              "cpu_estimated_updates": estimated,
              "valid_loss": info.get("valid_loss"), "valid_nll_loss": info.get("valid_nll_loss"),
              "curve": with_cpu(run_curve(run), costs),
              "budget": dict(run.budget), "train_command": run.train_command()[1:]}
    result.update(evaluate(run, result))
    return result


def run_item(name: str, seed: int, data: str, work: str, results: str, budget_name: str,
             overrides: Sequence[str] = (), progress=print) -> Dict:
    """Train (or finish) one configuration of ``configs.CONFIGS`` with one seed, decode the test
    set and write its hypotheses; returns the result dict (the queue writes it to
    ``RESULTS/runs/<name>_s<seed>.json``)."""
    budget = load_budget(budget_name, [*overrides, f"seed={seed}"])
    config = select_configs(CONFIGS, name, None)[0]
    run = plan_run(config, seed, data, work, budget, progress)
    item = Item(name, seed)
    result = record_run(run, item, config.get("label", name),
                        bleu_evaluation(data, budget, results, name, seed, progress), progress)
    result.update({"tables": config.get("tables", []), "decoder_N": run.dec_N,
                   "data": os.path.abspath(data), "run_dir": os.path.abspath(run.dir),
                   **row_fields(config, budget)})
    progress(f"[run] {item.id}: {result['updates']} updates, valid loss {result['valid_loss']}, "
             f"test BLEU {result['test']['bleu']:.2f} chrF {result['test']['chrf']:.2f}")
    return result
