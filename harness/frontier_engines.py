"""The speed / size / quality frontier of trained models: each checkpoint decoded on the test
set by every engine a user could deploy it with, at each batch size, one record per model.

Engines: ``fairseq`` (the eager generator, with the decode trace), ``torchscript``
(``torch.jit.script`` of fairseq's generator, what ``time_generate --script`` runs) and
CTranslate2 ``ct2_float32`` and ``ct2_int8`` (through :func:`fairseq_shared.export.api.export`;
a model that cannot be exported, SAN, records the reason instead) and ``hf``, the Hugging Face
export (``generate()`` with the same settings; its shared form takes SAN models, so SAN's ratio
over its vanilla shows in Hugging Face too). Per batch size, the engines of one model decode the
same sentences in the same batches (:class:`timing.Session`), in interleaved timed passes after
warm-up. Speed is read from the process's CPU time (one thread), wall clock beside it.
Hypotheses of the engines that claim exactness (TorchScript, CTranslate2 float32, Hugging Face)
are compared with fairseq's, sentence by sentence.
"""

import os
import statistics
from pathlib import Path
from typing import Callable, Dict, List

ENGINES = ("fairseq", "torchscript", "ct2_float32", "ct2_int8", "hf")
EXACT = {"torchscript": True, "ct2_float32": True, "ct2_int8": False,  # claims identical output
         "hf": True}
#: The export of each kind: its directory under the model's work directory, its flags.
EXPORTS = {"ct2": ("export", dict(ct2=True, quantization="int8")),
           "hf": ("export_hf", dict(hf=True))}
SCHEMA = 1


def parse_checkpoints(spec: str) -> Dict[str, str]:
    """``name=PATH,name=PATH,...`` -> ordered ``{name: path}``; a clear error otherwise."""
    out: Dict[str, str] = {}
    for item in [s for s in spec.split(",") if s.strip()]:
        name, sep, path = item.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ValueError(f"--checkpoints: '{item}' is not NAME=PATH "
                             "(e.g. --checkpoints vanilla=ckpt/a.pt,cycle_rev=ckpt/b.pt)")
        if name in out:
            raise ValueError(f"--checkpoints: the name '{name}' is given twice")
        if not os.path.isfile(path):
            raise ValueError(f"--checkpoints: {name}={path}: no such file")
        out[name] = path
    if not out:
        raise ValueError("--checkpoints: no checkpoint given")
    return out


def _export(name: str, checkpoint: str, data: str, work: str, settings: Dict,
            kind: str = "ct2") -> Dict:
    """The ``kind`` export (:data:`EXPORTS`) of one model, or why it has none."""
    from fairseq_shared.export.api import export
    from fairseq_shared.export.plain import ExportError
    from fairseq_shared.timing import resolve_data

    sub, flags = EXPORTS[kind]
    out = os.path.join(work, name, sub)
    try:
        report = export(checkpoint, out, **flags,
                        data=resolve_data(data)[0], subset=settings["subset"],
                        sentences=settings["verify_sentences"], beam=settings["beam"],
                        lenpen=settings["lenpen"], max_len_a=settings["max_len_a"],
                        max_len_b=settings["max_len_b"], threads=settings["threads"])
    except ExportError as e:
        return {"exportable": False, "reason": str(e)}
    return {"exportable": True, "ok": report["ok"], "dir": out,
            "lora_merged": report["lora_merged"],
            "verify": {k: {f: v.get(f) for f in ("sentences", "identical", "ties", "different")}
                       for k, v in report.get("verify", {}).items() if isinstance(v, dict)
                       and "identical" in v}}


def _engines(name, checkpoint, data, settings, export_info, hf_info=None):
    """The sessions (one eager, one TorchScript: loading and compiling once; the batch size is
    set on them before each batch size's passes) and ``{engine: runner, or why none}``."""
    from harness.decode import decode_args
    from fairseq_shared.timing import Session
    from fairseq_shared.timing.ct2_engine import CT2Engine, HFEngine

    # --num-workers 0: batches are built in this process (no loader process per pass)
    args = ["--num-workers", "0", *decode_args(
        {**settings, "batch_size": settings["batch_sizes"][0]}, settings["subset"])]
    subset, threads = settings["sentences"] or None, settings["threads"]
    eager = Session(data, checkpoint, args, subset=subset, threads=threads)
    runners: Dict[str, object] = {"fairseq": eager.load(name, checkpoint)}
    sessions = [eager]
    wanted = settings["engines"]
    if "torchscript" not in wanted:
        runners["torchscript"] = "not asked for (--engines)"
    else:
        try:
            scripted = Session(data, checkpoint, args, subset=subset, threads=threads, script=True)
            runners["torchscript"] = scripted.load(name, checkpoint)
            sessions.append(scripted)
        except Exception as e:  # noqa: BLE001  (a model TorchScript cannot compile: say why)
            runners["torchscript"] = f"torch.jit.script failed: {type(e).__name__}: {e}"[:500]
    exported = {  # engine -> (its export, its runner from the export's directory)
        "ct2_float32": (export_info, lambda d: CT2Engine(eager, os.path.join(d, "ct2"),
                                                         "default", threads)),
        "ct2_int8": (export_info, lambda d: CT2Engine(eager, os.path.join(d, "ct2_int8"),
                                                      "int8", threads)),
        "hf": (hf_info, lambda d: HFEngine(eager, os.path.join(d, "hf")))}
    for engine, (info, runner) in exported.items():
        if engine not in wanted:
            runners[engine] = "not asked for (--engines)"
        elif not info["exportable"]:
            runners[engine] = f"not exportable: {info['reason']}"
        else:
            runners[engine] = runner(info["dir"])
    return sessions, runners


def _median(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else None


def _cell(passes, outputs, session, refs, eager_outputs, eager_trace, engine) -> Dict:
    """One engine at one batch size: speed over its passes, steps, BLEU, exactness."""
    from fairseq_shared.scoring import score
    from fairseq_shared.timing.ct2_engine import detokenize

    last = passes[-1]
    hyps = detokenize(session, outputs)
    s = score(hyps, refs, digits=None)
    cell = {"sentences": last.sentences, "tokens": last.tokens,
            "cpu_seconds": [p.cpu_seconds for p in passes],
            "wall_seconds": [p.gen_seconds for p in passes], "threads": [p.threads for p in passes],
            # rates from the median pass time, so tok/s and ms/step read the same passes
            "cpu_tokens_per_s": last.tokens / _median([p.cpu_seconds for p in passes]),
            "wall_tokens_per_s": last.tokens / _median([p.gen_seconds for p in passes]),
            "bleu": s["bleu"], "chrf": s["chrf"],
            "bleu_signature": s["bleu_signature"], "chrf_signature": s["chrf_signature"],
            "hypotheses": hyps}
    trace, source = last.trace, "decode trace"
    if trace is None and engine == "torchscript" and outputs == eager_outputs:
        trace, source = eager_trace, "the fairseq trace (identical hypotheses: the same search)"
    if trace:
        cpu = _median(cell["cpu_seconds"])
        cell.update(steps=trace["steps"], sentence_steps=trace["sentence_steps"],
                    occupancy=trace["occupancy"], tail_steps=trace["tail_steps"],
                    hit_max=trace["hit_max"], steps_source=source,
                    cpu_ms_per_step=1000 * cpu / trace["steps"],
                    cpu_us_per_sentence_step=1e6 * cpu / trace["sentence_steps"])
    else:
        cell.update(steps=None, steps_source="not traced (the engine's own search)")
    if engine != "fairseq":
        differ = [sid for sid in session.ids.tolist() if outputs[sid] != eager_outputs[sid]]
        cell.update(exact_claimed=EXACT[engine], identical=len(session.ids) - len(differ),
                    compared=len(session.ids), differing_ids=differ[:20])
        if EXACT[engine]:
            cell["exact_ok"] = not differ
    return cell


def measure_model(name: str, checkpoint: str, data: str, work: str, settings: Dict,
                  progress: Callable = print) -> Dict:
    """Every engine of one checkpoint at every batch size: the model's frontier record."""
    import torch

    torch.set_num_threads(settings["threads"])
    progress(f"[frontier] {name}: export ({checkpoint})")
    export_info = (_export(name, checkpoint, data, work, settings)
                   if any(e.startswith("ct2") for e in settings["engines"])
                   else {"exportable": None, "reason": "not asked for (--engines)"})
    hf_info = (_export(name, checkpoint, data, work, settings, "hf")
               if "hf" in settings["engines"] else None)
    from fairseq_shared.timing import machine

    record: Dict = {"schema": SCHEMA, "model": name, "checkpoint": os.path.abspath(checkpoint),
                    "settings": settings, "machine": machine.describe(),
                    "export": export_info, "export_hf": hf_info,
                    "engines": {e: {"available": True, "batch": {}} for e in ENGINES}}
    sessions, runners = _engines(name, checkpoint, data, settings, export_info, hf_info)
    session = sessions[0]
    live = [(e, r) for e, r in runners.items() if not isinstance(r, str)]
    for engine, r in runners.items():
        if isinstance(r, str):
            record["engines"][engine].update(available=False, reason=r)
    for bs in settings["batch_sizes"]:
        for s in sessions:
            s.cfg.dataset.batch_size = bs
        passes, first = {e: [] for e, _ in live}, {}
        for k in range(settings["warmup"] + settings["repeats"]):
            order = live[k % len(live):] + live[:k % len(live)]
            for engine, runner in order:
                torch.set_num_threads(settings["threads"])
                if k < settings["warmup"]:  # the longest batches warm up as well as all
                    few = settings.get("warmup_batches")
                    runner.run_pass(max_batches=few, check=few is None, longest=True)
                    continue
                result, outputs = runner.run_pass()
                passes[engine].append(result)
                first.setdefault(engine, outputs)
                progress(f"[frontier] {name} b={bs} pass {k + 1 - settings['warmup']}/"
                         f"{settings['repeats']} {engine}: {result.cpu_tokens_per_s:.1f} CPU "
                         f"tok/s ({result.cpu_seconds:.2f} CPU s, {result.gen_seconds:.2f} s)")
        refs, ref_source = session.references()
        record.setdefault("references", ref_source)
        record.setdefault("params", runners["fairseq"].params)
        record.setdefault("sentences", int(len(session.ids)))
        eager_trace = passes["fairseq"][-1].trace
        for engine, _ in live:
            cell = record["engines"][engine]["batch"][str(bs)] = _cell(
                passes[engine], first[engine], session, refs, first["fairseq"], eager_trace, engine)
            if cell.get("exact_ok") is False:
                progress(f"[frontier] WARNING {name} b={bs} {engine}: claims fairseq's "
                         f"hypotheses but {cell['compared'] - cell['identical']} of "
                         f"{cell['compared']} differ (ids {cell['differing_ids'][:5]})")
        if "disk_bytes" not in record["engines"]["fairseq"]:
            # the weights by torch.save (tied tensors stored once): what a fairseq or
            # TorchScript deployment of this model ships, without optimizer state
            path = os.path.join(work, name, "weights.pt")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            torch.save(runners["fairseq"].models[0].state_dict(), path)
            size = os.path.getsize(path)
            for engine in ("fairseq", "torchscript"):
                record["engines"][engine].update(disk_bytes=size,
                                                 disk_file="torch.save(state_dict)")
            for engine, info, sub, file in (("ct2_float32", export_info, "ct2", "model.bin"),
                                            ("ct2_int8", export_info, "ct2_int8", "model.bin"),
                                            ("hf", hf_info, "hf", "model.safetensors")):
                if engine in settings["engines"] and info["exportable"]:
                    size = os.path.getsize(os.path.join(info["dir"], sub, file))
                    record["engines"][engine].update(disk_bytes=size, disk_file=file)
    return record


#: the flags a record is measured with: a record with other settings is measured again
SETTINGS = ("beam", "lenpen", "max_len_a", "max_len_b", "batch_sizes", "threads", "warmup",
            "repeats", "warmup_batches", "sentences", "subset", "engines", "verify_sentences")


def record_path(out: str, name: str) -> str:
    return os.path.join(out, "models", f"{name}.json")


def write_record(out: str, record: Dict) -> List[str]:
    """``models/<name>.json`` (hypotheses moved to ``hyp/<name>.<engine>.b<bs>.txt``; a cell
    whose hypotheses equal an earlier cell's names that cell's file, as the exact engines' do,
    so the tree keeps one copy)."""
    from harness.queue import write_result

    name = record["model"]
    paths = [record_path(out, name)]
    os.makedirs(os.path.join(out, "hyp"), exist_ok=True)
    os.makedirs(os.path.dirname(paths[0]), exist_ok=True)
    written: Dict[str, str] = {}  # text -> the file that holds it
    for engine, e in record["engines"].items():
        for bs, cell in e.get("batch", {}).items():
            hyps = cell.pop("hypotheses", None)
            if hyps is None:
                continue
            text = "".join(h + "\n" for h in hyps)
            if text not in written:
                rel = os.path.join("hyp", f"{name}.{engine}.b{bs}.txt")
                Path(out, rel).write_text(text, encoding="utf-8")
                written[text] = rel
                paths.append(os.path.join(out, rel))
            cell["hypotheses_file"] = written[text]
    write_result(Path(paths[0]), record)
    return paths
