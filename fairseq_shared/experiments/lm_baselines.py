"""The n-gram baselines of the language-model runs, on exactly the tokens fairseq reads.

The splits are read from the binarized corpus with fairseq's own data pipeline (the
dictionary and the indexed datasets that ``--task language_modeling`` loads), so the n-gram
models see the same token ids as the Transformers, ``<unk>`` included. Each verse is one
sample, as with ``--sample-break-mode eos``: it is scored as its pieces and its ``</s>``,
with the verse start as the only context of the first piece. Writes ``baselines.json``.
"""

import os
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from fairseq_shared.experiments.ngram import KneserNey
from fairseq_shared.experiments.queue import write_result

ORDERS = {"unigram": 1, "kn5": 5}
# KenLM's --discount_fallback, for an order whose count-of-counts give no valid discounts
# (sentencepiece pieces have few rare types: the unigram counts' n1..n4 here give D2 < 0)
FALLBACK = (0.5, 1.0, 1.5)
LABELS = {"unigram": "unigram (absolute discounting + uniform)",
          "kn5": "5-gram, interpolated modified Kneser-Ney"}
DEFINITION = (
    "perplexity per token = 2 ** (bits per token); every piece and every verse's </s> is a "
    "scored token, each verse is scored on its own from the verse start (fairseq-eval-lm "
    "with --sample-break-mode eos: the input is </s> w1 .. wm, the targets w1 .. wm </s>); "
    "pieces that never occur in the English training side are <unk> for every model")


def load_split(bin_dir: str, split: str) -> Tuple[List[List[int]], Dict]:
    """The split's verses as lists of token ids without the final ``</s>``, and the ids of
    the dictionary's special symbols and of the words that can be predicted."""
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(os.path.join(bin_dir, "dict.txt"))
    ds = data_utils.load_indexed_dataset(os.path.join(bin_dir, split), d)
    if ds is None:
        raise FileNotFoundError(f"{bin_dir}/{split}.bin: no such split (fairseq-preprocess "
                                "output expected)")
    verses = []
    for i in range(len(ds)):
        ids = ds[i].tolist()
        if not ids or ids[-1] != d.eos():
            raise ValueError(f"{bin_dir}/{split}: sample {i} does not end with </s>")
        verses.append(ids[:-1])
    # predictable: every symbol seen in training (count > 0), </s> and <unk>
    vocab = [i for i in range(d.nspecial, len(d)) if d.count[i] > 0] + [d.eos(), d.unk()]
    return verses, {"bos": d.bos(), "eos": d.eos(), "unk": d.unk(), "vocab": vocab,
                    "dictionary_entries": len(d)}


def evaluate_baselines(bin_dir: str, names: Sequence[str] = tuple(ORDERS),
                       splits: Sequence[str] = ("valid", "test"), progress=print) -> Dict:
    train, sym = load_split(bin_dir, "train")
    held = {s: load_split(bin_dir, s)[0] for s in splits}
    out = {"definition": DEFINITION, "data": os.path.abspath(bin_dir),
           "train_tokens": sum(len(v) + 1 for v in train), "models": {}}
    for name in names:
        if name not in ORDERS:
            raise ValueError(f"baseline '{name}'; allowed: {', '.join(ORDERS)}")
        t0 = time.time()
        lm = KneserNey(ORDERS[name], vocab=sym["vocab"], bos=sym["bos"], eos=sym["eos"],
                       unk=sym["unk"], fallback=FALLBACK).fit(train)
        fit_s = time.time() - t0
        entry = {"label": LABELS[name], **lm.summary(), "fit_seconds": round(fit_s, 1)}
        for split, verses in held.items():
            entry[split] = lm.evaluate(verses)
        entry["eval_seconds"] = round(time.time() - t0 - fit_s, 1)
        out["models"][name] = entry
        progress(f"[baselines] {name}: " + ", ".join(
            f"{s} ppl {entry[s]['perplexity']:.2f} ({entry[s]['tokens']} tokens, "
            f"{entry[s]['oov_tokens']} <unk>)" for s in held) + f"; {time.time() - t0:.0f}s")
        del lm
    return out


def write_baselines(bin_dir: str, results: str, progress=print) -> Path:
    res = evaluate_baselines(bin_dir, progress=progress)
    res["command"] = "python -m fairseq_shared.cli.lm_evidence baselines --data " + \
        os.path.relpath(os.path.dirname(os.path.abspath(bin_dir)))
    path = Path(results) / "baselines.json"
    write_result(path, res)
    return path
