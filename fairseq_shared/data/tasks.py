"""The papers' benchmarks as data: one :class:`Task` per language pair and test suite
(:data:`TASKS`), the files each needs and how they are prepared, trained and scored. Used by
:mod:`fairseq_shared.data.recipes` (preparation, the CLI) and
:mod:`fairseq_shared.data.recipe_runs` (training, evaluation).
"""

import dataclasses

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
