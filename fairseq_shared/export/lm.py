"""A shared language model's export: the plain ``transformer_lm`` pieces and the checks.

* :func:`plain_lm_config` -- the model configuration of fairseq's own ``transformer_lm``:
  exactly the fields of ``TransformerLanguageModelConfig`` (stock fairseq merges the stored
  configuration into that dataclass strictly, so every flag of this package must go,
  whatever flags are added later), resolved to plain values.
* :func:`legacy_lm_args` -- the ``argparse.Namespace`` CTranslate2's converter reads (its
  fairseq converter takes ``transformer_lm``; it sets the task up from the same namespace).
* :func:`verify` -- per-token log-probabilities of evenly spaced samples of a split, with
  teacher forcing: fairseq's ``SequenceScorer`` on the plain model must give exactly the
  shared model's; CTranslate2's ``Generator.score_batch`` must agree with fairseq to
  ``CT2_TOLERANCE`` in float32 (two implementations round differently), quantized models are
  reported only.
"""

import argparse
import dataclasses
import os
from typing import Dict, List, Sequence

import torch

PLAIN_MODEL = "transformer_lm"
CT2_TOLERANCE = 1e-4  # |log p| differences between CTranslate2 float32 and fairseq
Scores = Dict[int, torch.Tensor]  # sample id -> log-probability of each target token


def is_language_model(model) -> bool:
    from fairseq.models import FairseqLanguageModel

    return isinstance(model, FairseqLanguageModel)


def is_lm_checkpoint(checkpoint: dict) -> bool:
    """Whether a plain checkpoint dict (:func:`fairseq_shared.export.plain.plain_checkpoint`)
    holds a language model."""
    return checkpoint["cfg"]["model"].get("_name") == PLAIN_MODEL


def plain_lm_config(model_cfg) -> Dict:
    """The shared language model's configuration as stock ``transformer_lm``'s, plain types."""
    from fairseq.models.transformer_lm import TransformerLanguageModelConfig
    from omegaconf import OmegaConf

    if OmegaConf.is_config(model_cfg):
        values = OmegaConf.to_container(model_cfg, resolve=True, enum_to_str=True)
    else:
        values = dict(vars(model_cfg))
    stock = {f.name for f in dataclasses.fields(TransformerLanguageModelConfig)}
    plain = {k: v for k, v in values.items() if k in stock}
    plain["_name"] = PLAIN_MODEL
    plain["decoder_layers_to_keep"] = None  # already applied to the weights
    return plain


def legacy_lm_args(checkpoint: dict) -> argparse.Namespace:
    """The plain checkpoint's task and model configuration as one legacy namespace."""
    task, model = checkpoint["cfg"]["task"], checkpoint["cfg"]["model"]
    return argparse.Namespace(**{**task, **model, "task": task["_name"], "arch": PLAIN_MODEL})


def write_lm_dictionary(task, out_dir: str) -> Dict[str, str]:
    """``dict.txt``, which ``--task language_modeling`` reads (fairseq-preprocess
    ``--only-source`` writes it)."""
    path = os.path.join(out_dir, "dict.txt")
    task.source_dictionary.save(path)
    return {"dict": path}


# ---- verification --------------------------------------------------------------------
def fairseq_scores(model, task, dataset, ids: Sequence[int], batch_size: int = 16) -> Scores:
    from fairseq.sequence_scorer import SequenceScorer

    scorer = SequenceScorer(task.target_dictionary)
    out: Scores = {}
    with torch.no_grad():
        for start in range(0, len(ids), batch_size):
            batch = [dataset[int(i)] for i in ids[start:start + batch_size]]
            sample = dataset.collater(batch)
            for sid, hypos in zip(sample["id"].tolist(), scorer.generate([model], sample)):
                out[sid] = hypos[0]["positional_scores"].float()
    return out


def ct2_input(item, dictionary) -> List[str]:
    """One language-modeling sample as CTranslate2 scores it: the first token is the context
    only (fairseq's first source token), every later token is scored (fairseq's targets)."""
    source, target = item["source"].tolist(), item["target"].tolist()
    if source[1:] != target[:-1]:
        raise ValueError("the sample's target is not its source shifted by one token")
    return [dictionary[t] for t in source + target[-1:]]


def ct2_scores(model_dir: str, dictionary, dataset, ids: Sequence[int], threads: int = 1,
               compute_type: str = "default") -> Scores:
    import ctranslate2

    generator = ctranslate2.Generator(model_dir, device="cpu", inter_threads=1,
                                      intra_threads=threads, compute_type=compute_type)
    inputs = [ct2_input(dataset[int(i)], dictionary) for i in ids]
    results = generator.score_batch(inputs, max_input_length=0)
    return {int(i): torch.tensor(r.log_probs) for i, r in zip(ids, results)}


def compare_scores(reference: Scores, candidate: Scores, tolerance: float = 0.0) -> Dict:
    """Samples whose per-token log-probabilities agree to ``tolerance`` (0: bit-identical)."""
    if set(reference) != set(candidate):
        raise ValueError("the two models scored different samples")
    diffs = {}
    for sid, ref in reference.items():
        cand = candidate[sid]
        diffs[sid] = float("inf") if cand.shape != ref.shape else (
            (cand - ref).abs().max().item() if ref.numel() else 0.0)
    agree = sum(d <= tolerance for d in diffs.values())
    return {
        "sentences": len(reference),
        "tokens": sum(r.numel() for r in reference.values()),
        "identical": agree,
        "different": len(reference) - agree,
        "max_abs_diff": max(diffs.values(), default=0.0),
        "tolerance": tolerance,
        "ok": agree == len(reference),
    }


def verify(shared_model, plain_model, task, dataset, ids, ct2_dirs: Dict[str, str],
           threads: int = 1) -> Dict:
    """The log-prob checks of the export (see the module docstring)."""
    shared = fairseq_scores(shared_model, task, dataset, ids)
    plain = fairseq_scores(plain_model, task, dataset, ids)
    report = {"fairseq_plain_vs_shared": compare_scores(shared, plain)}
    for name, model_dir in ct2_dirs.items():
        scores = ct2_scores(model_dir, task.source_dictionary, dataset, ids, threads)
        result = compare_scores(plain, scores, CT2_TOLERANCE)
        if name != "float32":
            result["required"] = False  # quantized weights change the log-probs
        report[f"ct2_{name}_vs_fairseq"] = result
    return report


def summary_line(key: str, value: Dict) -> str:
    return (
        f"verify {key}: {value['identical']}/{value['sentences']} samples with the same "
        f"log-probs ({value['tokens']} tokens, max |diff| {value['max_abs_diff']:.2e}, "
        f"tolerance {value['tolerance']:g}), {value['different']} different"
        + ("" if value.get("required", True) else " (not required: quantized)")
    )
