"""``export``: what ``python -m fairseq_shared.cli.export`` runs."""

import json
import logging
import os
from typing import Dict, Optional

from fairseq_shared.export import ct2 as ct2_lib
from fairseq_shared.export import lm as lm_lib
from fairseq_shared.export.plain import ExportError, load_shared, plain_checkpoint, write_plain
from fairseq_shared.export.verify import compare, ct2_hypotheses, fairseq_hypotheses

logger = logging.getLogger(__name__)


def load_plain(path: str, data: str):
    """Load the exported checkpoint the way stock fairseq does (strict, weights-only)."""
    from fairseq import checkpoint_utils
    from fairseq.models.transformer import TransformerModel
    from fairseq.models.transformer_lm import TransformerLanguageModel

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": data}
    )
    model = models[0].eval()
    if type(model) not in (TransformerModel, TransformerLanguageModel):
        raise ExportError(
            f"{path} loads as {type(model).__name__}, not fairseq's TransformerModel or "
            "TransformerLanguageModel"
        )
    return model, task


def export(checkpoint: str, out_dir: str, ct2: bool = False, quantization: Optional[str] = None,
           data: Optional[str] = None, subset: str = "test", sentences: int = 100,
           beam: int = 4, lenpen: float = 1.0, max_len_a: float = 0.0, max_len_b: int = 200,
           threads: int = 1) -> Dict:
    """Write ``out_dir/checkpoint.pt`` (+ dictionaries) and, with ``ct2``, ``out_dir/ct2``
    (float32) and ``out_dir/ct2_<quantization>``; verify on ``sentences`` sentences of
    ``subset`` (0: skip): a translation model's hypotheses (beam search with ``beam``,
    ``lenpen``, ``max_len_a``, ``max_len_b``), a language model's per-token log-probs
    (:func:`fairseq_shared.export.lm.verify`). Returns the report (also
    ``out_dir/export.json``)."""
    from fairseq_shared.timing import select_ids

    if quantization and not ct2:
        raise ExportError("--quantization needs --ct2")
    if quantization is not None and quantization not in ct2_lib.QUANTIZATIONS:
        raise ExportError(
            f"--quantization: unknown value '{quantization}'; allowed: "
            f"{', '.join(ct2_lib.QUANTIZATIONS)}"
        )
    loaded = load_shared(checkpoint, data)
    path = write_plain(loaded, out_dir)
    report: Dict = {"checkpoint": os.path.abspath(checkpoint), "plain_checkpoint": path,
                    "sharing": {s: v.describe() for s, v in loaded.model.sharing.items()}}
    plain_model, _ = load_plain(path, out_dir)
    ct2_dirs = {}
    if ct2:
        checkpoint_dict = plain_checkpoint(loaded, out_dir)
        for q in [None] + ([quantization] if quantization else []):
            target = os.path.join(out_dir, "ct2" if q is None else f"ct2_{q}")
            ct2_dirs[q or "float32"] = ct2_lib.convert(checkpoint_dict, out_dir, target, q)
            report[f"ct2_{q or 'float32'}"] = {
                "dir": target, **ct2_lib.size_report(target, loaded.model)}
    if sentences:
        task = loaded.task
        task.load_dataset(subset)
        dataset = task.dataset(subset)
        ids = select_ids(len(dataset), sentences).tolist()
        if lm_lib.is_language_model(loaded.model):
            report["verify"] = {"subset": subset, **lm_lib.verify(
                loaded.model, plain_model, task, dataset, ids, ct2_dirs, threads)}
            return _finish(report, out_dir)
        settings = dict(beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b)
        shared = fairseq_hypotheses(loaded.model, task, dataset, ids, **settings)
        plain = fairseq_hypotheses(plain_model, task, dataset, ids, **settings)
        report["verify"] = {"subset": subset, "settings": settings,
                            "fairseq_plain_vs_shared": compare(
                                shared, plain, loaded.model, dataset, lenpen)}
        for name, model_dir in ct2_dirs.items():
            decoder = ct2_lib.CT2Decoder(model_dir, task.source_dictionary,
                                         task.target_dictionary, threads=threads)
            hyps = ct2_hypotheses(decoder, plain_model, dataset, ids, **settings)
            result = compare(plain, hyps, plain_model, dataset, lenpen)
            if name != "float32":
                result["required"] = False  # quantized weights may change hypotheses
            report["verify"][f"ct2_{name}_vs_fairseq"] = result
    return _finish(report, out_dir)


def _finish(report: Dict, out_dir: str) -> Dict:
    """``report["ok"]`` from its required checks; the report written to ``export.json``."""
    report["ok"] = all(
        v.get("ok", True) or v.get("required") is False
        for v in report.get("verify", {}).values() if isinstance(v, dict) and "ok" in v
    )
    with open(os.path.join(out_dir, "export.json"), "w") as f:
        json.dump(report, f, indent=1)
    return report


def summary(report: Dict) -> str:
    """A few lines for the terminal."""
    lines = [f"plain fairseq model: {report['plain_checkpoint']}"]
    lines += [f"  {stack}: {text}" for stack, text in report["sharing"].items()]
    for key, value in report.items():
        if key.startswith("ct2_"):
            lines.append(
                f"{key}: {value['dir']}  model.bin {value['model_bin_bytes']:,} bytes = "
                f"{value['ratio_to_unique_plus_positions']}x the unique fp32 weights "
                f"({value['unique_fp32_weight_bytes']:,}) + position table "
                f"({value['position_table_bytes']:,})"
            )
    for key, value in report.get("verify", {}).items():
        if isinstance(value, dict) and "max_abs_diff" in value:
            lines.append(lm_lib.summary_line(key, value))
        elif isinstance(value, dict) and "identical" in value:
            lines.append(
                f"verify {key}: {value['identical']}/{value['sentences']} identical, "
                f"{value['ties']} exact score ties, {value['different']} different"
                + ("" if value.get("required", True) else " (not required: quantized)")
            )
    lines.append("export OK" if report["ok"] else "export FAILED verification")
    return "\n".join(lines)
