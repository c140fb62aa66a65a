"""The papers' benchmarks as one pipeline with a config per task (:data:`TASKS`); this module
prepares the data, :mod:`fairseq_shared.data.recipe_runs` trains, averages and evaluates.

    python -m fairseq_shared.cli.recipes TASK prepare  --work DIR   # fetch, tokenize, BPE, binarize
    python -m fairseq_shared.cli.recipes TASK train    --work DIR   # fairseq-train, papers' settings
    python -m fairseq_shared.cli.recipes TASK average  --work DIR   # average the last 10 checkpoints
    python -m fairseq_shared.cli.recipes TASK evaluate --work DIR   # beam 4, detok sacreBLEU/chrF
    python -m fairseq_shared.cli.recipes TASK all      --work DIR
    python -m fairseq_shared.cli.recipes --list

Data: with ``TASK_DIR`` set (e.g. ``IWSLT14_DE_EN_DIR``, ``WMT17_DIR``, ``NIST_ZH_EN_DIR``; see
``Task.env``) the files are taken from that local folder, laid out as the downloads unpack;
otherwise the archives in ``Task.urls`` are downloaded into ``WORK/orig`` (needs internet).
Every stage is restartable (``pipeline.Stages``).

Scaling of ``train`` (environment): ARCH (default per task), GPUS (>1 adds
--distributed-world-size), UPDATE_FREQ, MAX_TOKENS, MAX_UPDATE, SAVE_DIR, CPU=1 (--cpu),
TRAIN_ARGS (extra fairseq-train flags, appended last so they win). ``evaluate``: CHECKPOINT
(default WORK/checkpoints/avg_last10.pt, else checkpoint_last.pt), GEN_ARGS.

Papers' settings: Takase & Kiyono (2021): Adam (0.9, 0.98), lr 0.002, inverse_sqrt, warmup 8000,
dropout 0.3, label smoothing 0.1, share-all-embeddings, ~459k tokens per update (e.g. 8 GPUs x
MAX_TOKENS 7168 x UPDATE_FREQ 8), 50k updates; average the last 10 checkpoints; beam 4, lenpen 0.6
on newstest2014 and 1.0 elsewhere; detokenized sacreBLEU. Used for every task here except the
IWSLT model size (transformer_*_iwslt_de_en) and NIST's separate vocabularies.
"""

import html
import io
import json
import os
import re
import shutil
import tarfile
import urllib.request
import zipfile
from pathlib import Path

from fairseq_shared.checkpoint_io import CheckpointError, atomic_write
from fairseq_shared.data import pipeline
from fairseq_shared.data.pipeline import log, read_lines, write_lines
from fairseq_shared.data.tasks import NEWSTEST, TASKS, Task  # noqa: F401  (the catalogue)


# --------------------------------------------------------------------------- readers

def _read_plain(path):
    return read_lines(path)


def _read_tags(path):
    """IWSLT ``train.tags.*``: as fairseq's prepare-iwslt14.sh (drop <url>/<talkid>/<keywords>
    lines, keep the text of <title>/<description>)."""
    out = []
    for line in read_lines(path):
        if any(t in line for t in ("<url>", "<talkid>", "<keywords>")):
            continue
        line = re.sub(r"</?(title|description)>", "", line)
        # the other header lines (<reviewer>, <translator>, <speaker>, ...) carry no text
        if line.lstrip().startswith("<"):
            continue
        out.append(line.strip())
    return out


def _read_segs(path):
    """<seg id="..."> lines of IWSLT .xml and WMT .sgm files."""
    out = []
    for line in read_lines(path):
        m = re.search(r"<seg[^>]*>(.*)</seg>", line)
        if m:
            out.append(html.unescape(m.group(1).strip()).replace("\u2019", "'")
                       if path.suffix == ".xml" else html.unescape(m.group(1).strip()))
    return out


def read_text(path):
    path = Path(path)
    if path.suffix in (".xml", ".sgm"):
        return _read_segs(path)
    if ".tags." in path.name:
        return _read_tags(path)
    return _read_plain(path)


# --------------------------------------------------------------------------- prepare

def data_dir(task, work):
    local = os.environ.get(task.env)
    if local:
        path = Path(local)
        if not path.is_dir():
            raise FileNotFoundError(f"{task.env}={local} is not a folder")
        return path
    return Path(work) / "orig"


def fetch(task, work):
    """Download and unpack ``task.urls`` into WORK/orig (unless TASK's env var names a folder)."""
    if os.environ.get(task.env):
        log(f"{task.name}: using local data {os.environ[task.env]} ({task.env})")
        return
    if not task.urls:
        raise SystemExit(f"{task.name} uses licensed data that cannot be downloaded: set "
                         f"{task.env} to a folder laid out as described: {task.notes}")
    orig = Path(work) / "orig"
    orig.mkdir(parents=True, exist_ok=True)
    for url in task.urls:
        name = re.sub(r"[^\w.-]", "_", url.rsplit("/", 1)[-1]) or "download"
        target = orig / "downloads" / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            log(f"downloading {url}")
            try:
                with urllib.request.urlopen(url) as response:
                    atomic_write(str(target), lambda f: shutil.copyfileobj(response, f))
            except (OSError, CheckpointError) as e:
                raise SystemExit(f"cannot download {url} ({e}). Without internet, set "
                                 f"{task.env} to a folder with the unpacked files.") from e
        log(f"unpacking {target.name}")
        if zipfile.is_zipfile(target):
            zipfile.ZipFile(target).extractall(orig)
        else:
            with tarfile.open(target) as tar:
                tar.extractall(orig, filter="data")


def _concat(base, files):
    lines = []
    for f in files:
        path = Path(base) / f
        if not path.exists():
            raise FileNotFoundError(f"missing {path}")
        lines += read_text(path)
    return lines


def extract_raw(task, work):
    """WORK/raw/{train,valid}.{src,tgt} and test sets (src + refs), as plain text."""
    base, raw = data_dir(task, work), Path(work) / "raw"
    src, tgt = [], []
    for s, t in task.train:
        a, b = _concat(base, [s]), _concat(base, [t])
        if len(a) != len(b):
            raise ValueError(f"{s} has {len(a)} lines, {t} {len(b)}")
        src += a
        tgt += b
    if task.valid:
        vs, vt = _concat(base, [task.valid[0]]), _concat(base, [task.valid[1]])
    else:  # every Nth training line is validation data (fairseq's IWSLT script)
        n = task.valid_every
        vs = [x for i, x in enumerate(src, 1) if i % n == 0]
        vt = [x for i, x in enumerate(tgt, 1) if i % n == 0]
        src = [x for i, x in enumerate(src, 1) if i % n]
        tgt = [x for i, x in enumerate(tgt, 1) if i % n]
    write_lines(raw / f"train.{task.src}", src)
    write_lines(raw / f"train.{task.tgt}", tgt)
    write_lines(raw / f"valid.{task.src}", vs)
    write_lines(raw / f"valid.{task.tgt}", vt)
    for name, (srcs, ref_sets) in task.test.items():
        s = _concat(base, srcs)
        write_lines(raw / f"{name}.{task.src}", s)
        for k, refs in enumerate(ref_sets):
            r = _concat(base, refs)
            if len(r) != len(s):
                raise ValueError(f"{name}: {len(s)} source lines, {len(r)} in reference {k}")
            if task.lowercase and not task.bleu_lowercase:
                r = [x.lower() for x in r]  # scored against what the model was trained to say
            write_lines(raw / f"{name}.ref{k}.{task.tgt}", r)
    log(f"{task.name}: train {len(src)}, valid {len(vs)}, tests "
        + ", ".join(f"{n} {pipeline.count_lines(raw / f'{n}.{task.src}')}" for n in task.test))


def audit_raw(task, work):
    """The contamination audit of the raw splits (valid and every test set) against train:
    near-duplicates and the lookup baseline -> WORK/audit.{json,md}; warns above 1% of a
    test set (the papers' test sets are fixed, so it reports rather than stops)."""
    from fairseq_shared.data import audit

    report = audit.audit_corpus(Path(work) / "raw", task.src, task.tgt, ["valid", *task.test])
    audit.write_report(report, work)
    for split, r in report["splits"].items():
        share = r["near_duplicate_share"][str(audit.NEAR_DUPLICATE)]
        log(f"audit {split}: {100 * share:.2f}% near-duplicates of train (chrF >= "
            f"{audit.NEAR_DUPLICATE}), lookup BLEU {r['lookup']['bleu']:.2f}"
            + ("  WARNING: above 1%" if split != "valid" and share > 0.01 else ""))


def _moses(task, lang):
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)

    def process(line):
        if task.prep == "moses" and task.aggressive_dash:
            line = norm.normalize(line)
        line = tok.tokenize(line, aggressive_dash_splits=task.aggressive_dash,
                            return_str=True, escape=False)
        return line.lower() if task.lowercase else line
    return process


def clean_pairs(src, tgt, max_len, ratio, min_len=1):
    """Moses clean-corpus-n: drop pairs with a side outside [min_len, max_len] tokens or a
    token-length ratio above ``ratio``."""
    keep_s, keep_t = [], []
    for s, t in zip(src, tgt):
        ls, lt = len(s.split()), len(t.split())
        if not (min_len <= ls <= max_len and min_len <= lt <= max_len):
            continue
        if ls > ratio * lt or lt > ratio * ls:
            continue
        keep_s.append(s)
        keep_t.append(t)
    return keep_s, keep_t


def splits_of(task):
    return ["train", "valid"] + list(task.test)


def tokenize(task, work):
    """Moses tokenization (moses tasks) of every split; train (and valid when cut from the
    training data) cleaned by length. pretokenized/spm tasks copy the text through."""
    raw, tok = Path(work) / "raw", Path(work) / "tok"
    procs = {l: (_moses(task, l) if task.prep == "moses" else
                 (lambda x, l=l: x.lower() if (task.lowercase and l == task.tgt) else x))
             for l in (task.src, task.tgt)}
    for split in splits_of(task):
        s = [procs[task.src](x) for x in read_lines(raw / f"{split}.{task.src}")]
        t = None
        if split in ("train", "valid"):
            t = [procs[task.tgt](x) for x in read_lines(raw / f"{split}.{task.tgt}")]
            if split == "train" or not task.valid:
                n = len(s)
                # unsegmented Chinese has no word count to compare: length limit only
                ratio = float("inf") if task.prep == "spm" else task.len_ratio
                s, t = clean_pairs(s, t, task.max_len, ratio)
                log(f"{split}: kept {len(s)} of {n} pairs after cleaning")
        elif split in task.test_tgt:  # test target side as distributed (already tokenized)
            t = read_lines(data_dir(task, work) / task.test_tgt[split])
        else:  # test: the target side is the first reference, tokenized like training data
            t = [procs[task.tgt](x) for x in read_lines(raw / f"{split}.ref0.{task.tgt}")]
        write_lines(tok / f"{split}.{task.src}", s)
        write_lines(tok / f"{split}.{task.tgt}", t)


def learn_and_apply_bpe(task, work):
    """Joint subword-nmt BPE (moses tasks) or per-language sentencepiece (spm tasks)."""
    tok, bpe = Path(work) / "tok", Path(work) / "bpe"
    bpe.mkdir(parents=True, exist_ok=True)
    langs = (task.src, task.tgt)
    if task.prep == "spm":
        for l in langs:
            pipeline.train_sentencepiece([tok / f"train.{l}"], bpe / f"spm.{l}",
                                         task.bpe_merges, character_coverage=0.9995)
            for split in splits_of(task):
                pipeline.spm_encode_file(bpe / f"spm.{l}.model", tok / f"{split}.{l}",
                                         bpe / f"{split}.{l}")
        return
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    joint = bpe / "train.joint.tmp"
    write_lines(joint, (x for l in langs for x in read_lines(tok / f"train.{l}")))
    codes = bpe / "codes"

    def write_codes(f):
        text = io.TextIOWrapper(f, encoding="utf-8")
        with open(joint, encoding="utf-8") as fin:
            learn_bpe(fin, text, task.bpe_merges)
        text.flush()
        text.detach()  # leaves f open for atomic_write

    atomic_write(str(codes), write_codes)
    joint.unlink()
    with open(codes, encoding="utf-8") as f:
        applier = BPE(f)
    for split in splits_of(task):
        for l in langs:
            write_lines(bpe / f"{split}.{l}",
                        (applier.process_line(x) for x in read_lines(tok / f"{split}.{l}")))


def binarize(task, work):
    work = Path(work)
    text = work / ("bpe" if task.prep in ("moses", "spm") else "tok")
    if task.prep == "pretokenized":
        text = work / "tok"
    pipeline.fairseq_preprocess(
        task.src, task.tgt, text / "train", work / "bin", validpref=text / "valid",
        testpref=[text / name for name in task.test], joined=task.prep != "spm")
    # which binarized test subset is which test set
    pipeline.write_text(work / "bin" / "test_sets.json", json.dumps(
        {name: ("test" if i == 0 else f"test{i}") for i, name in enumerate(task.test)}, indent=1))


def prepare(task, work):
    work = Path(work)
    stages = pipeline.Stages(work)
    stages.run("fetch", [data_dir(task, work)] if os.environ.get(task.env) else [work / "orig"],
               lambda: fetch(task, work), params={"env": os.environ.get(task.env)})
    raw_files = [work / "raw" / f"{s}.{l}" for s in ("train", "valid") for l in (task.src, task.tgt)]
    stages.run("extract", raw_files, lambda: extract_raw(task, work),
               params={"task": task.name, "local": os.environ.get(task.env)}, after=["fetch"])
    stages.run("audit", [work / "audit.json", work / "audit.md"],
               lambda: audit_raw(task, work), after=["extract"])
    tok_files = [work / "tok" / f"{s}.{l}" for s in splits_of(task) for l in (task.src, task.tgt)]
    stages.run("tokenize", tok_files, lambda: tokenize(task, work),
               params={"prep": task.prep, "lc": task.lowercase, "max_len": task.max_len},
               after=["extract"])
    if task.prep in ("moses", "spm"):
        stages.run("bpe", [work / "bpe" / f"{s}.{l}" for s in splits_of(task)
                           for l in (task.src, task.tgt)],
                   lambda: learn_and_apply_bpe(task, work),
                   params={"merges": task.bpe_merges, "prep": task.prep}, after=["tokenize"])
    stages.run("binarize", [work / "bin" / "test_sets.json",
                            work / "bin" / f"train.{task.pair}.{task.src}.bin"],
               lambda: binarize(task, work), after=["bpe" if task.prep != "pretokenized"
                                                    else "tokenize"])
    log(f"{task.name}: data ready in {work / 'bin'}")
