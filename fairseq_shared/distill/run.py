"""Sequence-level knowledge distillation (Kim & Rush 2016): a teacher translates the training
split of a binarized corpus, and its hypotheses become the targets of a new corpus.

The teacher is one checkpoint of the plug-in (SAN included) or an ensemble of them. It decodes
with the fastest engine that is exact for it: CTranslate2 when it is one checkpoint that
exports (:mod:`fairseq_shared.export`) and the export passes its check on the first
``check_sentences`` valid sentences with the distillation's beam and length settings;
fairseq's beam search otherwise (an ensemble, a SAN model, a failed check), the reason
recorded. Both decode sentences of one source length per batch, so that each gets its own
length limit, as ``fairseq-generate --batch-size 1`` gives it.

``--out`` holds:

* ``.lock``: held by the run for its whole length, so that a second run into the same
  ``--out`` is refused (:func:`~fairseq_shared.distill.checks.locked`);
* ``state.json``: the teachers (sha256, path relative to ``--out``), the corpus (the sha256
  of its files), the settings, written before anything else, and the engine once chosen
  (with the sha256 of the teacher's export it checked); a resumed run reads the engine from
  it and re-checks the export against it;
* ``teacher_export/``: the CTranslate2 export and its check (when it passed);
* ``shards/train.NNNNN.txt``: ``id<TAB>hypothesis`` for the training sentences
  ``[N * shard_size, (N + 1) * shard_size)``, each written atomically when its shard is done,
  so that a killed run resumes at the first missing shard and gives the same corpus;
* ``text/train.{src,tgt}``: the distilled corpus as token strings; ``bin/``: it binarized
  with the teacher's dictionaries (fairseq-preprocess), with the corpus's valid and test sets
  copied, real references kept;
* ``manifest.json``, written last: the command, teachers, engine and settings, the sentences
  skipped for a source longer than the teacher's positions, and the teacher's valid BLEU.

Every file is written under a fresh temporary name and renamed into place, so a run killed at
any moment (the teacher's export included) resumes with the same command.
"""

import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from fairseq_shared import checkpoint_io
from fairseq_shared.distill import checks
from fairseq_shared.data.pipeline import fairseq_preprocess, log, write_lines
from fairseq_shared.scoring import post_process, score

#: The budget's decoding settings (harness/configs.py, _DECODE_DEFAULTS).
DEFAULTS = dict(beam=4, lenpen=1.0, max_len_a=1.2, max_len_b=10)


@dataclass
class Teacher:
    paths: List[str]
    models: list
    task: object
    sha256: List[str]

    def max_source_positions(self) -> int:
        return min(int(m.max_positions()[0]) for m in self.models)


def load_teacher(paths: Sequence[str], corpus_bin: str, trained_on: Optional[str] = None) -> Teacher:
    """Each checkpoint of ``paths`` (a translation model of the plug-in) with the task of
    ``corpus_bin``, refused with one line when the corpus's dictionaries are not the ones in
    its training data directory (``trained_on``: where they are now, when it moved)."""
    from fairseq_shared.models import architectures
    from fairseq_shared.tools.checkpoints import Takes, refuse

    takes = Takes("distil", (architectures.MODEL,), error=checks.DistillError)
    models, task, hashes = [], None, []
    for path in paths:
        state = checkpoint_io.load(path, expect="translation", tool="distill")
        cfg = state["cfg"]
        refuse(cfg.model, takes)
        recorded = str(getattr(cfg.task, "data", "") or "").split(os.pathsep)[0]
        cfg.task.data = corpus_bin
        own = checkpoint_io.setup_task(cfg.task, path, corpus_bin)
        src, tgt = own.cfg.source_lang, own.cfg.target_lang
        checks.check_dictionaries(path, trained_on or recorded, corpus_bin, {
            f"dict.{src}.txt": len(own.source_dictionary),
            f"dict.{tgt}.txt": len(own.target_dictionary)}, state["model"],
            given=trained_on is not None)
        model = own.build_model(cfg.model)
        model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
        models.append(model.eval())
        task = task or own
        hashes.append(checkpoint_io.file_sha256(path))
    return Teacher(list(paths), models, task, hashes)


# ---------------------------------------------------------------------------- the engine
EXPORT = "teacher_export"


def choose_engine(teacher: Teacher, corpus_bin: str, out: str, settings: Dict,
                  check_sentences: int, threads: int) -> Dict:
    """``{"engine": "ct2" | "fairseq", "reason": ..., "export_sha256": ...}`` by the module's
    rule (``export_sha256``: :func:`decoding_files` of the export that passed the check)."""
    from fairseq_shared.export.api import export
    from fairseq_shared.export.plain import ExportError

    if len(teacher.paths) > 1:
        return {"engine": "fairseq", "reason": f"an ensemble of {len(teacher.paths)} "
                "checkpoints (CTranslate2 decodes one model)"}
    target = os.path.join(out, EXPORT)
    try:
        # force: the directory is the run's own (its --out is locked and holds nothing else),
        # whatever a killed or corrupted export left in it
        report = export(teacher.paths[0], target, ct2=True, data=corpus_bin, subset="valid",
                        sentences=check_sentences, threads=threads, force=True, **settings)
    except ExportError as e:
        return {"engine": "fairseq", "reason": f"the teacher does not export: {e}"}
    except ValueError as e:  # a check sentence longer than the teacher's positions
        return {"engine": "fairseq", "reason": f"the CTranslate2 export could not be checked: {e}"}
    check = report["verify"]["ct2_float32_vs_fairseq"]
    if not report["ok"]:
        return {"engine": "fairseq", "reason": f"the CTranslate2 export failed its check on "
                f"{check_sentences} valid sentences (max |diff| {check['max_abs_diff']:.2g} per "
                f"token > {check['tolerance']:g})"}
    return {"engine": "ct2", "export_sha256": decoding_files(target),
            "reason": f"the CTranslate2 export passed its check on {check['sentences']} valid "
            f"sentences (max |diff| {check['max_abs_diff']:.2g} per token; searches identical on "
            f"{check['search']['identical']})"}


def decoding_files(export_dir: str) -> Dict[str, str]:
    """``{path: sha256}`` of the CTranslate2 model of ``export_dir`` (``ct2/``), the files
    that decode (the export's plain checkpoint differs from one export to the next)."""
    from fairseq_shared.export.directory import file_hashes

    return file_hashes(os.path.join(export_dir, "ct2"))


def reuse_engine(teacher: Teacher, engine: Dict, corpus_bin: str, out: str, settings: Dict,
                 check_sentences: int, threads: int) -> Dict:
    """The engine ``state.json`` recorded, its export re-checked: files that differ from the
    ones that passed the check (a corrupted or replaced export, or a run killed before it
    recorded them) are exported and checked again, and must come out the same."""
    if engine.get("engine") != "ct2":
        return engine
    target = os.path.join(out, EXPORT)
    if os.path.isdir(target) and decoding_files(target) == engine.get("export_sha256"):
        return engine
    log(f"{target}: not the export that passed the check; exporting the teacher again")
    again = choose_engine(teacher, corpus_bin, out, settings, check_sentences, threads)
    recorded = engine.get("export_sha256")  # None: a state.json of an earlier version
    if again["engine"] != "ct2" or recorded is not None and again["export_sha256"] != recorded:
        raise checks.DistillError(
            f"--out {out}: the teacher's export {target} changed since its shards were decoded, "
            f"and exporting it again gives other files ({again['reason']}); distil into a new "
            "--out")
    return again


def decoder(teacher: Teacher, engine: Dict, out: str, settings: Dict, batch_size: int,
            threads: int):
    """``decode(dataset, ids) -> {id: target ids without EOS}`` with ``engine``."""
    import torch

    from fairseq_shared.export import verify

    torch.set_num_threads(threads)
    if engine["engine"] == "ct2":
        from fairseq_shared.export.ct2 import CT2Decoder, source_limit

        model = teacher.models[0]
        ct2 = CT2Decoder(os.path.join(out, EXPORT, "ct2"), teacher.task.source_dictionary,
                         teacher.task.target_dictionary, threads=threads,
                         max_source_positions=source_limit(model))

        def run(dataset, ids):
            return verify.ct2_hypotheses(ct2, model, dataset, ids, batch_size=batch_size,
                                         **settings)
    else:
        def run(dataset, ids):
            return verify.fairseq_hypotheses(teacher.models, teacher.task, dataset, ids,
                                             batch_size=batch_size, **settings)

    def decode(dataset, ids):
        ordered = sorted(ids, key=lambda i: (int(dataset.src_sizes[i]), i))  # full batches
        return {sid: tokens[:-1] for sid, (tokens, _) in run(dataset, ordered).items()} if ids else {}

    return decode


# ---------------------------------------------------------------------------- the steps
def shard_path(out: str, k: int) -> str:
    return os.path.join(out, "shards", f"train.{k:05d}.txt")


def decode_shards(teacher: Teacher, dataset, decode, out: str, shard_size: int,
                  keep: List[int]) -> None:
    """Every missing shard decoded and written atomically, with tqdm's progress and ETA."""
    from tqdm import tqdm

    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    tgt_dict = teacher.task.target_dictionary
    kept = set(keep)
    shards = range((len(dataset) + shard_size - 1) // shard_size)
    todo = [k for k in shards if not os.path.exists(shard_path(out, k))]
    if len(todo) < len(shards):
        log(f"resuming: {len(shards) - len(todo)} of {len(shards)} shards done")
    done = sum(len(_shard_ids(k, shard_size, len(dataset), kept)) for k in shards if k not in todo)
    with tqdm(total=len(keep), initial=done, unit="sent", desc="distil", dynamic_ncols=True) as bar:
        for k in todo:
            ids = _shard_ids(k, shard_size, len(dataset), kept)
            hyps = decode(dataset, ids)
            text = "".join(f"{i}\t{tgt_dict.string(hyps[i])}\n" for i in ids)
            checkpoint_io.atomic_write(shard_path(out, k), lambda f: f.write(text.encode()))
            bar.update(len(ids))


def _shard_ids(k: int, shard_size: int, n: int, kept) -> List[int]:
    return [i for i in range(k * shard_size, min(n, (k + 1) * shard_size)) if i in kept]


def assemble(teacher: Teacher, dataset, out: str, corpus_bin: str) -> int:
    """``text/train.{src,tgt}`` from the shards, binarized into ``bin/`` with the teacher's
    dictionaries; the corpus's valid and test sets copied. Returns the sentences."""
    task = teacher.task
    src, tgt = task.cfg.source_lang, task.cfg.target_lang
    pairs = []
    for path in sorted(glob.glob(os.path.join(out, "shards", "train.*.txt"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                sid, _, hyp = line.rstrip("\n").partition("\t")
                pairs.append((task.source_dictionary.string(dataset.src[int(sid)]), hyp))
    text = os.path.join(out, "text")
    write_lines(os.path.join(text, f"train.{src}"), (s for s, _ in pairs))
    write_lines(os.path.join(text, f"train.{tgt}"), (t for _, t in pairs))
    dicts = {lang: os.path.join(corpus_bin, f"dict.{lang}.txt") for lang in (src, tgt)}
    joined = checks.same_content(*dicts.values())
    fairseq_preprocess(src, tgt, os.path.join(text, "train"), os.path.join(out, "bin"),
                       joined=joined, srcdict=dicts[src],
                       extra=() if joined else ("--tgtdict", dicts[tgt]))
    held_out = re.compile(r"(valid|test)\d*\.")
    for name in sorted(os.listdir(corpus_bin)):
        if held_out.match(name):
            checkpoint_io.copy_file(os.path.join(corpus_bin, name), os.path.join(out, "bin", name))
    return len(pairs)


def valid_bleu(teacher: Teacher, decode, post: str) -> Dict:
    """The teacher's BLEU on the valid set, hypotheses and references detokenized alike."""
    task = teacher.task
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    limit = teacher.max_source_positions()
    ids = [i for i in range(len(dataset)) if int(dataset.src_sizes[i]) <= limit]
    hyps = decode(dataset, ids)
    d = task.target_dictionary
    scored = score([post_process(d.string(hyps[i]), post) for i in ids],
                   [post_process(d.string(dataset.tgt[i]), post) for i in ids])
    return {"bleu": scored["bleu"], "chrf": scored["chrf"], "sentences": len(ids),
            "of": len(dataset), "post_process": post, "bleu_signature": scored["bleu_signature"]}


# ---------------------------------------------------------------------------- the command
def distill(teachers: Sequence[str], data: str, out: Optional[str] = None,
            settings: Optional[Dict] = None, batch_size: int = 64, shard_size: int = 1000,
            check_sentences: int = 20, threads: int = 1, post: str = "auto",
            command: str = "", trained_on: Optional[str] = None) -> Dict:
    """Distil ``data``'s training split with ``teachers`` into ``out`` (default:
    ``<corpus>/distilled``); returns the manifest. Resumes a killed run. ``trained_on``: the
    directory that holds the teachers' dictionaries now, when their training data moved."""
    from fairseq_shared.timing.session import resolve_data

    settings = {**DEFAULTS, **(settings or {})}
    checks.check_settings(batch_size=batch_size, shard_size=shard_size,
                          check_sentences=check_sentences, threads=threads, **settings)
    corpus_bin, root = resolve_data(data)
    out = os.path.abspath(out or os.path.join(root or os.path.dirname(corpus_bin), "distilled"))
    if post == "auto":
        post = "sentencepiece" if root and os.path.exists(os.path.join(root, "spm.model")) else "none"
    checks.check_inputs(out, {**{f"teacher {p}": p for p in teachers}, "--data": corpus_bin})
    for path in teachers:
        checkpoint_io.check_readable(path)
    hashes = [{"path": os.path.abspath(p), "sha256": checkpoint_io.file_sha256(p)}
              for p in teachers if os.path.isfile(p)]
    plan = {"teachers": [{**t, "path": os.path.relpath(t["path"], out)} for t in hashes],
            "corpus": corpus_bin, "corpus_sha256": checks.corpus_hashes(corpus_bin),
            "settings": settings, "batch_size": batch_size, "shard_size": shard_size}
    checks.check_output(out, plan)  # before the lock creates --out
    teacher = load_teacher(teachers, corpus_bin, trained_on)  # before "done already"
    with checks.locked(out):
        state = checks.check_output(out, plan)  # again: another run may have written it
        manifest_path = os.path.join(out, "manifest.json")
        if state is not None and os.path.exists(manifest_path):
            log(f"{out}: done already ({manifest_path})")
            with open(manifest_path) as f:
                return json.load(f)
        state_path = os.path.join(out, "state.json")
        if state is None:  # written first: whatever a kill leaves beside it is resumable
            state = {**plan, "engine": None}
            _write_json(state_path, state)
        if state.get("engine") is None:
            engine = choose_engine(teacher, corpus_bin, out, settings, check_sentences, threads)
        else:
            engine = reuse_engine(teacher, state["engine"], corpus_bin, out, settings,
                                  check_sentences, threads)
        if engine != state.get("engine"):
            _write_json(state_path, {**state, "engine": engine})
        log(f"engine: {engine['engine']} ({engine['reason']})")
        decode = decoder(teacher, engine, out, settings, batch_size, threads)
        teacher.task.load_dataset("train")
        dataset = teacher.task.dataset("train")
        limit = teacher.max_source_positions()
        keep = [i for i in range(len(dataset)) if int(dataset.src_sizes[i]) <= limit]
        decode_shards(teacher, dataset, decode, out, shard_size, keep)
        sentences = assemble(teacher, dataset, out, corpus_bin)
        manifest = {"command": command, "teachers": hashes, "engine": engine["engine"],
                    "engine_reason": engine["reason"], "settings": settings,
                    "batch_size": batch_size, "shard_size": shard_size, "corpus": corpus_bin,
                    "bin": os.path.join(out, "bin"), "train_sentences": len(dataset),
                    "distilled_sentences": sentences,
                    # pins the corpus: students compared across seeds and machines must have
                    # trained on the same targets (budget's corpus snapshot checks it)
                    "train_sha256": checkpoint_io.file_sha256(os.path.join(
                        out, "text", f"train.{teacher.task.cfg.target_lang}")),
                    "skipped_source_too_long": {"sentences": len(dataset) - len(keep),
                                                "max_source_positions": limit},
                    "teacher_valid": valid_bleu(teacher, decode, post)}
        _write_json(manifest_path, manifest)
    return manifest


def _write_json(path: str, value: Dict) -> None:
    checkpoint_io.atomic_write(path, lambda f: f.write(json.dumps(value, indent=1).encode()))
