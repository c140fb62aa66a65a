"""``export``: what ``python -m fairseq_shared.cli.export`` runs."""

import json
import logging
import os
from typing import Dict, Optional

from fairseq_shared import checkpoint_io
from fairseq_shared.checkpoint_io import Kind
from fairseq_shared.export import ct2 as ct2_lib
from fairseq_shared.export import directory, kinds, verify
from fairseq_shared.export.plain import (
    ExportError, load_shared, plain_checkpoint, sentencepiece_model, write_inputs, write_plain,
)
from fairseq_shared.export.outputs import planned_files, refuse_overwrite

logger = logging.getLogger(__name__)


def load_plain(path: str, data: str, kind: Optional[Kind] = None):
    """Load the exported checkpoint the way stock fairseq does (strict, weights-only): it must
    be fairseq's own model of ``kind`` (None: of either kind)."""
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": data}
    )
    model = models[0].eval()
    allowed = [k.stock_class for k in ([kinds.of(kind)] if kind else kinds.EXPORTS.values())]
    if type(model) not in allowed:
        raise ExportError(
            f"{path} loads as {type(model).__name__}, not fairseq's "
            + " or ".join(c.__name__ for c in allowed)
        )
    return model, task


def validate(sentences: int, beam: int, lenpen: float, max_len_a: float, max_len_b: int,
             quantization: Optional[str], ct2: bool, hf: bool = False,
             hf_form: Optional[str] = None, out_dir: str = "DIR") -> None:
    """One-line :class:`ExportError` for a flag out of its range, or an ``--out`` the export
    could not be put in place of (:func:`~fairseq_shared.export.directory.
    refuse_unreplaceable`), before any work."""
    import math

    directory.refuse_unreplaceable(out_dir)
    checks = [
        ("--sentences", sentences, isinstance(sentences, int) and sentences >= 0,
         "an integer >= 0 (0: no verification)"),
        ("--beam", beam, isinstance(beam, int) and beam >= 1, "an integer >= 1"),
        ("--lenpen", lenpen, math.isfinite(lenpen), "a finite number"),
        ("--max-len-a", max_len_a, math.isfinite(max_len_a) and max_len_a >= 0,
         "a finite number >= 0"),
        ("--max-len-b", max_len_b, isinstance(max_len_b, int) and max_len_b >= 1,
         "an integer >= 1"),
    ]
    for flag, value, ok, allowed in checks:
        if not ok:
            raise ExportError(f"{flag} {value}: must be {allowed}")
    if quantization and not ct2:
        raise ExportError("--quantization needs --ct2")
    if hf_form is not None and not hf:
        raise ExportError("--hf-form needs --hf")
    if hf_form is not None and hf_form not in ("shared", "stock"):
        raise ExportError(f"--hf-form: unknown value '{hf_form}'; allowed: shared, stock")
    if quantization is not None and quantization not in ct2_lib.QUANTIZATIONS:
        raise ExportError(
            f"--quantization: unknown value '{quantization}'; allowed: "
            f"{', '.join(ct2_lib.QUANTIZATIONS)}"
        )


def _inputs(checkpoint: str, loaded, kind, spm: Optional[str]) -> Dict[str, str]:
    """What the export reads: the checkpoint, the dictionaries, the sentencepiece model."""
    inputs = {"the input CHECKPOINT": checkpoint}
    for data_dir in str(getattr(loaded.cfg.task, "data", "") or "").split(os.pathsep):
        for name in kind.dictionary_names(loaded.task):
            inputs[f"the dictionary {name} of --data {data_dir}"] = os.path.join(data_dir, name)
    inputs["the corpus's sentencepiece model"] = spm
    return inputs


def export(checkpoint: str, out_dir: str, ct2: bool = False, quantization: Optional[str] = None,
           hf: bool = False, data: Optional[str] = None, subset: str = "test", sentences: int = 100,
           beam: int = 4, lenpen: float = 1.0, max_len_a: float = 0.0, max_len_b: int = 200,
           threads: int = 1, force: bool = False, hf_form: Optional[str] = None) -> Dict:
    """Write ``out_dir/checkpoint.pt`` (+ dictionaries) and, with ``ct2``, ``out_dir/ct2``
    (float32) and ``out_dir/ct2_<quantization>``, with ``hf`` ``out_dir/hf`` (a Hugging Face
    model, tokenizer and generation configuration: :mod:`.hf`, ``hf_form`` its form, None: the
    shared one where it applies; a SAN model exports with ``hf`` only, and has no plain
    checkpoint); verify on ``sentences`` sentences of
    ``subset`` (0: skip): a translation model by the check of :mod:`.verify` (teacher-forced
    scores of both engines' beam-search hypotheses, with ``beam``, ``lenpen``,
    ``max_len_a``, ``max_len_b``), a language model's per-token log-probs
    (:func:`fairseq_shared.export.verify.verify_lm`). Refuses, before writing anything, an
    ``out_dir`` that would overwrite one of its inputs, that names no directory or a mount
    point, or that holds anything but the files an earlier export's ``export.json`` lists
    (``force``: replace it whole). A full disk is one :class:`ExportError` naming the file.
    Written beside ``out_dir`` and moved into place only when the check passes
    (:mod:`.directory`). Returns the report (also
    ``out_dir/export.json``, with the sha256 of every file it vouches for)."""
    validate(sentences, beam, lenpen, max_len_a, max_len_b, quantization, ct2, hf, hf_form,
             out_dir)
    ct2_names = (["ct2"] + ([f"ct2_{quantization}"] if quantization else [])) if ct2 else []
    refuse_overwrite({"the input CHECKPOINT": checkpoint},
                     planned_files(out_dir, [], ct2_names, hf), out_dir)
    loaded = load_shared(checkpoint, data, san=hf and not ct2)
    kind, spm = kinds.of(loaded.kind), sentencepiece_model(loaded.cfg)
    refuse_overwrite(_inputs(checkpoint, loaded, kind, spm),
                     planned_files(out_dir, kind.dictionary_names(loaded.task), ct2_names, hf),
                     out_dir)
    target = None
    if hf:
        from fairseq_shared.export import hf as hf_lib

        kind.check_hf(ExportError)
        target = hf_lib.choose_target(loaded, hf_form)  # refused before any writing
    with directory.staged(out_dir, force) as staging:
        try:
            report = _export_into(staging, checkpoint, loaded, kind, spm, ct2, quantization,
                                  target, subset, sentences, beam, lenpen, max_len_a,
                                  max_len_b, threads)
        except Exception as error:  # a full disk, whoever wrote (torch, transformers, shutil)
            failure = directory.write_error(error, staging, out_dir)
            if failure is None:
                raise
            raise failure from error
        report = _relocated(report, staging, out_dir)
        report["ok"] = _passed(report)
        if report["ok"]:
            report["sha256"] = directory.file_hashes(staging)
            checkpoint_io.atomic_write(os.path.join(staging, directory.REPORT),
                                       lambda f: f.write(json.dumps(report, indent=1).encode()))
            directory.publish(staging, out_dir)
    return report


def _export_into(out_dir: str, checkpoint: str, loaded, kind, spm: Optional[str], ct2: bool,
                 quantization, hf_target, subset: str, sentences: int, beam: int,
                 lenpen: float, max_len_a: float, max_len_b: int, threads: int) -> Dict:
    """Every file of the export written into ``out_dir`` (a staging directory), verified;
    the report, its paths in ``out_dir``. ``kind``: the model's
    :class:`~fairseq_shared.export.kinds.ExportKind`; ``spm``: the corpus's sentencepiece
    model (None: none); ``hf_target``: None, or the Hugging Face class and the note of
    :func:`fairseq_shared.export.hf.choose_target`."""
    from fairseq_shared.tools.checkpoints import uses_san

    san = uses_san(loaded.cfg.model)  # no plain fairseq layer takes another's attention
    checkpoint_dict = None if san else plain_checkpoint(loaded, out_dir)  # built once
    path = None if san else write_plain(checkpoint_dict, out_dir)
    write_inputs(loaded, out_dir, spm)
    report: Dict = {"checkpoint": os.path.abspath(checkpoint), "kind": kind.kind.value,
                    "plain_checkpoint": path,
                    "sharing": {s: v.describe() for s, v in loaded.model.sharing.items()},
                    # the exports merge each layer's LoRA delta into its weights: those layers
                    # are stored apart (an unshared model's size), not once per set
                    "lora_merged": [s for s, v in loaded.model.sharing.items() if v.lora_rank]}
    plain_model = None if san else load_plain(path, out_dir, kind.kind)[0]
    ct2_dirs = {}
    if ct2:
        legacy = kind.legacy_checkpoint(checkpoint_dict)
        for q in [None] + ([quantization] if quantization else []):
            target = os.path.join(out_dir, "ct2" if q is None else f"ct2_{q}")
            ct2_dirs[q or "float32"] = ct2_lib.convert(legacy, out_dir, target, q)
            report[f"ct2_{q or 'float32'}"] = {
                "dir": target, **ct2_lib.size_report(target, loaded.model),
                "max_input_length": int(kind.source_stack(plain_model).max_positions())}
    hf_dir = None
    if hf_target:
        from fairseq_shared.export import hf as hf_lib

        hf_dir = os.path.join(out_dir, "hf")
        generation = dict(beam=beam, lenpen=lenpen, max_len_b=max_len_b)
        target, form_note = hf_target
        notes = hf_lib.write(loaded, hf_dir, generation, target, spm)
        report["hf"] = {"dir": hf_dir, "class": target, "tokenizer": notes,
                        "form": "shared" if target == hf_lib.SHARED else "stock",
                        **({"form_note": form_note} if form_note else {}),
                        **hf_lib.disk_report(hf_dir, loaded.model),
                        "generation_config": {**generation, "min_len": 1},
                        "not_in_generation_config": [
                            "fairseq_shared.export.hf_generation.FairseqLengthLimit (pass it "
                            "as generate(logits_processor=[...]))"]
                        + ([f"--max-len-a {max_len_a} (HF has no source-relative limit)"]
                           if max_len_a else [])}
    if sentences:
        settings = dict(beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b)
        report["verify"] = verify.verify(loaded, kind, plain_model, subset, sentences,
                                         settings, ct2_dirs, threads, hf_dir)
    return report


def _passed(report: Dict) -> bool:
    """Whether every required check of ``report`` passed."""
    return all(
        v.get("ok", True) or v.get("required") is False
        for v in report.get("verify", {}).values() if isinstance(v, dict) and "ok" in v
    )


def _relocated(value, staging: str, out_dir: str):
    """``value`` (the report) with the staging directory's paths as they will be in
    ``out_dir``."""
    if isinstance(value, dict):
        return {k: _relocated(v, staging, out_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_relocated(v, staging, out_dir) for v in value]
    if isinstance(value, str) and (value == staging or value.startswith(staging + os.sep)):
        return out_dir + value[len(staging):]
    return value


def summary(report: Dict) -> str:
    """A few lines for the terminal."""
    lines = [f"plain fairseq model: {report['plain_checkpoint'] or 'none (a SAN model)'}"]
    lines += [f"  {stack}: {text}" for stack, text in report["sharing"].items()]
    for key, value in report.items():
        if key.startswith("ct2_"):
            lines.append(
                f"{key}: {value['dir']}  model.bin {value['model_bin_bytes']:,} bytes = "
                f"{value['ratio_to_unique_plus_positions']}x the unique fp32 weights "
                f"({value['unique_fp32_weight_bytes']:,}) + position table "
                f"({value['position_table_bytes']:,})"
            )
    if "hf" in report:
        h = report["hf"]
        if h.get("form_note"):
            lines.append(f"hf: {h['form_note']}")
        lines.append(f"hf: {h['dir']}  {h['class']}, model.safetensors {h['safetensors_bytes']:,} "
                     f"bytes = position tables ({h['position_table_bytes']:,}) + "
                     f"{h['ratio_to_unique']}x the unique fp32 weights "
                     f"({h['unique_fp32_weight_bytes']:,}: {h['why']}); tokenizer: "
                     + "; ".join(h["tokenizer"]))
    lines += kinds.of(report["kind"]).summary_lines(report.get("verify", {}))
    lines.append("export OK" if report["ok"] else "export FAILED verification; nothing was "
                 "written to --out (an earlier export there is kept)")
    return "\n".join(lines)
