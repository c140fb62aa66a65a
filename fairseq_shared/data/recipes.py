"""The papers' benchmarks as one pipeline with a config per task (:data:`TASKS`); this module
prepares the data, :mod:`fairseq_shared.experiments.recipe_runs` trains, averages and evaluates.

    python -m fairseq_shared.data.recipes TASK prepare  --work DIR   # fetch, tokenize, BPE, binarize
    python -m fairseq_shared.data.recipes TASK train    --work DIR   # fairseq-train, papers' settings
    python -m fairseq_shared.data.recipes TASK average  --work DIR   # average the last 10 checkpoints
    python -m fairseq_shared.data.recipes TASK evaluate --work DIR   # beam 4, detok sacreBLEU/chrF
    python -m fairseq_shared.data.recipes TASK all      --work DIR
    python -m fairseq_shared.data.recipes --list

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

import argparse
import dataclasses
import html
import json
import os
import random
import re
import shlex
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

from fairseq_shared.data import pipeline
from fairseq_shared.data.pipeline import log, read_lines, write_lines


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


READERS = {"plain": _read_plain, "tags": _read_tags, "segs": _read_segs}


def read_text(path):
    path = Path(path)
    if path.suffix in (".xml", ".sgm"):
        return _read_segs(path)
    if ".tags." in path.name:
        return _read_tags(path)
    return _read_plain(path)


# --------------------------------------------------------------------------- task configs

@dataclasses.dataclass
class Task:
    name: str
    src: str
    tgt: str
    env: str                      # local-data variable
    urls: list                    # archives unpacked into WORK/orig
    train: list                   # [(src file, tgt file)] relative to the data dir
    test: dict                    # name -> (src file, [ref files]) relative to the data dir
    valid: tuple = None           # (src file, tgt file), or None: every Nth training line
    valid_every: int = 0
    prep: str = "moses"           # moses | pretokenized | spm
    lowercase: bool = False
    aggressive_dash: bool = True
    bpe_merges: int = 32000
    max_len: int = 250
    len_ratio: float = 1.5
    arch: str = "transformer_cycle_rev"
    train_args: tuple = ()
    lenpen: dict = dataclasses.field(default_factory=dict)   # test name -> lenpen (default 1.0)
    bleu_lowercase: bool = False
    test_tgt: dict = dataclasses.field(default_factory=dict)  # pretokenized target-side files
    notes: str = ""

    @property
    def pair(self):
        return f"{self.src}-{self.tgt}"


NEWSTEST = range(2010, 2017)

TASKS = {}


def _register(task):
    TASKS[task.name] = task
    return task


_register(Task(
    name="iwslt14_de_en", src="de", tgt="en", env="IWSLT14_DE_EN_DIR",
    urls=["http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"],
    train=[("de-en/train.tags.de-en.de", "de-en/train.tags.de-en.en")],
    valid=None, valid_every=23,
    test={"test": ([f"de-en/IWSLT14.TED.{s}.de-en.de.xml" for s in
                    ("dev2010", "tst2010", "tst2011", "tst2012")],
                   [[f"de-en/IWSLT14.TED.{s}.de-en.en.xml" for s in
                     ("dev2010", "tst2010", "tst2011", "tst2012")]])},
    prep="moses", lowercase=True, aggressive_dash=False, bpe_merges=10000, max_len=175,
    arch="transformer_cycle_rev_iwslt_de_en",
    train_args=("--max-tokens", "4096"),
    notes="fairseq's prepare-iwslt14.sh: lowercased, Moses-tokenized, joint BPE 10k; test = "
          "TED dev2010+tst2010-2012 concatenated; valid = every 23rd training line.",
))

_register(Task(
    name="wmt16_en_de", src="en", tgt="de", env="WMT16_EN_DE_DIR",
    # Google's preprocessed WMT16 (Ott et al. 2018; Takase & Kiyono): tokenized, BPE 32k.
    urls=["https://drive.google.com/uc?export=download&id=0B_bZck-ksdkpM25jRUN2X2UxMm8"],
    train=[("train.tok.clean.bpe.32000.en", "train.tok.clean.bpe.32000.de")],
    valid=("newstest2013.tok.bpe.32000.en", "newstest2013.tok.bpe.32000.de"),
    test={f"newstest{y}": ([f"newstest{y}.tok.bpe.32000.en"], [[f"newstest{y}.de"]])
          for y in NEWSTEST},
    test_tgt={f"newstest{y}": f"newstest{y}.tok.bpe.32000.de" for y in NEWSTEST},
    prep="pretokenized", arch="transformer_cycle_rev",
    train_args=("--max-tokens", "7168"),
    lenpen={"newstest2014": 0.6},
    notes="Ott et al.'s data (Google's wmt16_en_de.tar.gz): train.tok.clean.bpe.32000, valid "
          "newstest2013, tests newstest2010-2016 scored detokenized against newstestYYYY.de.",
))

_register(Task(
    name="wmt14_en_de", src="en", tgt="de", env="WMT14_EN_DE_DIR",
    urls=["http://statmt.org/wmt13/training-parallel-europarl-v7.tgz",
          "http://statmt.org/wmt13/training-parallel-commoncrawl.tgz",
          "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
          "http://statmt.org/wmt14/test-full.tgz", "http://statmt.org/wmt14/dev.tgz"],
    train=[("training/europarl-v7.de-en.en", "training/europarl-v7.de-en.de"),
           ("commoncrawl.de-en.en", "commoncrawl.de-en.de"),
           ("training/news-commentary-v12.de-en.en", "training/news-commentary-v12.de-en.de")],
    valid=("dev/newstest2013.en", "dev/newstest2013.de"),
    test={"newstest2014": (["test-full/newstest2014-deen-src.en.sgm"],
                           [["test-full/newstest2014-deen-ref.de.sgm"]])},
    prep="moses", bpe_merges=32000, arch="transformer_cycle_rev",
    train_args=("--max-tokens", "7168"), lenpen={"newstest2014": 0.6},
    notes="Xiao et al.'s WMT14 En-De (4.5M): fairseq's corpus list, Moses normalize+tokenize "
          "(-a), clean 1-250 ratio 1.5, joint BPE 32k (their merge count is not stated).",
))

# WMT17 (Xiao et al.): En<->De, Fi, Lv, Ru. Training corpora per language pair, as unpacked
# from WMT17's training-parallel-*.tgz / rapid2016 / leta / dcep archives into one folder.
WMT17_TRAIN = {
    "de": [("training/europarl-v7.de-en.{x}", "training/europarl-v7.de-en.en"),
           ("commoncrawl.de-en.{x}", "commoncrawl.de-en.en"),
           ("training/news-commentary-v12.de-en.{x}", "training/news-commentary-v12.de-en.en"),
           ("rapid2016.de-en.{x}", "rapid2016.de-en.en")],
    "fi": [("training/europarl-v8.fi-en.{x}", "training/europarl-v8.fi-en.en"),
           ("wiki/fi-en/titles.fi-en.{x}", "wiki/fi-en/titles.fi-en.en"),
           ("rapid2016.en-fi.{x}", "rapid2016.en-fi.en")],
    "lv": [("training/europarl-v8.lv-en.{x}", "training/europarl-v8.lv-en.en"),
           ("rapid2016.en-lv.{x}", "rapid2016.en-lv.en"),
           ("LETA-lv-en/leta.{x}", "LETA-lv-en/leta.en"),
           ("dcep.lv-en.{x}", "dcep.lv-en.en")],
    "ru": [("commoncrawl.ru-en.{x}", "commoncrawl.ru-en.en"),
           ("training/news-commentary-v12.ru-en.{x}", "training/news-commentary-v12.ru-en.en"),
           ("corpus.en_ru.1m.{x}", "corpus.en_ru.1m.en"),
           ("wiki/ru-en/guide.ru-en.{x}", "wiki/ru-en/guide.ru-en.en")],
}
WMT17_VALID = {"de": "newstest2016", "fi": "newstest2016", "ru": "newstest2016",
               "lv": "newsdev2017"}


def _wmt17(x, src, tgt):
    pair = f"{x}en"  # sgm file names: newstest2017-deen-src.de.sgm, newstest2017-ende-ref.de.sgm
    dev = WMT17_VALID[x]
    train = [(s.format(x=x), t) if src == x else (t, s.format(x=x)) for s, t in WMT17_TRAIN[x]]
    sd = f"{src}{tgt}"
    return Task(
        name=f"wmt17_{src}_{tgt}", src=src, tgt=tgt, env="WMT17_DIR",
        urls=["http://data.statmt.org/wmt17/translation-task/training-parallel-ep-v8.tgz",
              "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
              "http://data.statmt.org/wmt17/translation-task/rapid2016.tgz",
              "http://data.statmt.org/wmt17/translation-task/dev.tgz",
              "http://data.statmt.org/wmt17/translation-task/test.tgz"],
        train=train,
        valid=(f"dev/{dev}-{sd}-src.{src}.sgm", f"dev/{dev}-{sd}-ref.{tgt}.sgm"),
        test={"newstest2017": ([f"test/newstest2017-{sd}-src.{src}.sgm"],
                               [[f"test/newstest2017-{sd}-ref.{tgt}.sgm"]])},
        prep="moses", bpe_merges=32000, arch="transformer_cycle_rev",
        train_args=("--max-tokens", "7168"),
        notes=f"WMT17 {src}->{tgt} ({pair}): Moses normalize+tokenize (-a), clean 1-250 ratio 1.5,"
              " joint BPE 32k (Xiao et al. do not state theirs); valid "
              f"{dev}, test newstest2017.",
    )


for _x in ("de", "fi", "lv", "ru"):
    _register(_wmt17(_x, "en", _x))
    _register(_wmt17(_x, _x, "en"))

_register(Task(
    name="nist_zh_en", src="zh", tgt="en", env="NIST_ZH_EN_DIR", urls=[],
    train=[("train.zh", "train.en")],
    valid=("nist02/src.zh", "nist02/ref0.en"),
    test={f"nist{y}": ([f"nist{y}/src.zh"], [[f"nist{y}/ref{i}.en"] for i in range(4)])
          for y in ("03", "04", "05", "06", "08", "12")},
    prep="spm", lowercase=True, bpe_merges=32000, max_len=200, arch="transformer_cycle_rev",
    train_args=("--max-tokens", "7168"), bleu_lowercase=True,
    notes="Licensed LDC data (no download): NIST_ZH_EN_DIR holds train.{zh,en} (the LDC "
          "corpora, concatenated, one sentence per line), nist02/ (valid) and nistYY/ "
          "(src.zh, ref0-3.en) test folders. No Chinese word segmenter is installed: each "
          "side gets its own sentencepiece model (32k); English lowercased; case-insensitive "
          "BLEU against the 4 references.",
))

# the multi-reference test layout: [ref files] per reference set
for _t in TASKS.values():
    for _name, (_srcs, _refs) in list(_t.test.items()):
        if _refs and isinstance(_refs[0], str):
            _t.test[_name] = (_srcs, [_refs])


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
            tmp = target.with_suffix(".part")
            try:
                urllib.request.urlretrieve(url, tmp)
            except OSError as e:
                raise SystemExit(f"cannot download {url} ({e}). Without internet, set "
                                 f"{task.env} to a folder with the unpacked files.") from e
            tmp.replace(target)
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
    with open(joint, "w", encoding="utf-8") as f:
        for l in langs:
            f.writelines(x + "\n" for x in read_lines(tok / f"train.{l}"))
    codes = bpe / "codes"
    with open(joint, encoding="utf-8") as fin, open(codes.with_suffix(".tmp"), "w",
                                                      encoding="utf-8") as fout:
        learn_bpe(fin, fout, task.bpe_merges)
    codes.with_suffix(".tmp").replace(codes)
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
    (work / "bin" / "test_sets.json").write_text(json.dumps(
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("task", nargs="?", choices=sorted(TASKS))
    p.add_argument("step", nargs="?", default="prepare",
                   choices=["prepare", "train", "average", "evaluate", "all", "show"])
    p.add_argument("--work", default=None, help="work folder (default work/TASK)")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    if args.list or not args.task:
        for name, t in TASKS.items():
            print(f"{name:16s} {t.src}->{t.tgt}  data: ${t.env}  {t.notes}")
        return 0
    from fairseq_shared.experiments.recipe_runs import average, evaluate, train, train_command

    task = TASKS[args.task]
    work = Path(args.work or Path("work") / task.name)
    if args.step == "show":
        print(" ".join(shlex.quote(c) for c in train_command(task, work)))
        return 0
    if args.step in ("prepare", "all"):
        prepare(task, work)
    if args.step in ("train", "all"):
        train(task, work)
    if args.step in ("average", "all"):
        average(task, work)
    if args.step in ("evaluate", "all"):
        print(json.dumps({k: {"bleu": v["bleu"], "chrf": v["chrf"]}
                          for k, v in evaluate(task, work).items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
