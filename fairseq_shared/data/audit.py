"""Contamination audit of a prepared parallel corpus: how close held-out data is to training data.

    python -m fairseq_shared.cli.audit RAW_DIR [--src es --tgt en] [--splits valid test]
                                        [--out DIR] [--max-contamination 0.01]

``RAW_DIR`` holds plain detokenized text ``{train,valid,test}.{src,tgt}``. For every held-out
split the audit reports

* exact duplicates: held-out source, target or pair found verbatim in train;
* near-duplicates: the share of held-out pairs whose closest training pair scores sentence
  chrF >= t (t in 50, 60, 70, 80, 90) on either side (source against source, target against
  target), with the closest examples;
* the lookup baseline: a "translation" with no model, the target side of the training pair
  whose source is most similar to the held-out source; its corpus BLEU and chrF. A model is
  only worth what it scores above this.

Exact chrF on every (held-out, train) pair would be millions of sentence scores, so candidates
are retrieved first: TF-IDF over character 3-5-grams, cosine similarity, the ``k`` best train
pairs per held-out pair and side; then sacreBLEU's sentence chrF on the candidates only. A near
duplicate that is not among the top ``k`` by character n-grams on either side is missed; with
k = 10 and chrF >= 70 that needs ten closer training verses, each of which is then reported.

Exact duplicates are matched after whitespace normalisation (ends stripped, runs of spaces
and tabs made one space). The audit is whole or refuses: a held-out split with one side
missing, two sides of unequal length, an empty side or bytes that are not UTF-8 stop it with
the file (and line) named; a requested split with neither side is a stated ``absent`` row.

Writes ``audit.json`` and ``audit.md`` under ``--out`` (default: the parent of ``RAW_DIR``).
With ``--max-contamination X`` it exits with status 1 when the test split's share of
near-duplicates at chrF >= 70 is above X.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from fairseq_shared.data import pipeline
from fairseq_shared.errors import printable, printable_data

THRESHOLDS = (50, 60, 70, 80, 90)
NEAR_DUPLICATE = 70  # the threshold the corpus builders act on
DEFAULT_K = 10


class AuditError(ValueError):
    """A corpus the audit cannot report on whole; the message names the file (and line)."""


def normalise_space(text: str) -> str:
    """The form exact duplicates are compared in: ends stripped, inner whitespace runs one space."""
    return " ".join(text.split())


class CharNgramIndex:
    """Cosine nearest neighbours over TF-IDF vectors of character 3-5-grams.

    The vocabulary and IDF weights are fitted on at most ``fit_max`` evenly spaced texts and
    the index is kept in chunks of ``chunk`` texts, so that a WMT-sized training side (millions
    of sentences) fits in memory; for a corpus under both limits it is plain TF-IDF."""

    def __init__(self, texts: Sequence[str], fit_max: int = 200_000, chunk: int = 200_000):
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5),
                                          sublinear_tf=True, lowercase=True, dtype=np.float32)
        step = max(1, len(texts) // fit_max)
        self.vectorizer.fit(texts[::step])
        self.size = len(texts)
        self.chunks = [(start, self.vectorizer.transform(texts[start:start + chunk]))
                       for start in range(0, len(texts), chunk)]

    def top_k(self, queries: Sequence[str], k: int, block: int = 256) -> np.ndarray:
        """Indices of the ``k`` most similar indexed texts for each query: best first, equal
        similarities in corpus order, so every CPU retrieves the same (:func:`best_per_row`)."""
        k = min(k, self.size)
        q = self.vectorizer.transform(queries)
        out = np.zeros((len(queries), k), dtype=np.int64)
        for b in range(0, len(queries), block):
            best_ids = best_sims = None
            for start, matrix in self.chunks:
                ids, sims = best_per_row((q[b:b + block] @ matrix.T).toarray(), k)
                ids = ids + start
                if best_ids is not None:
                    ids = np.concatenate([best_ids, ids], axis=1)
                    sims = np.concatenate([best_sims, sims], axis=1)
                order = np.lexsort((ids, -sims), axis=1)[:, :k]
                best_ids = np.take_along_axis(ids, order, axis=1)
                best_sims = np.take_along_axis(sims, order, axis=1)
            out[b:b + block] = best_ids
        return out


def best_per_row(sims: np.ndarray, k: int):
    """The ``k`` largest values of each row of ``sims`` and their columns, largest first and
    equal values by column. ``np.argpartition`` alone would choose among equal values (the same
    verse twice in a corpus) in an order that differs between CPUs."""
    kk = min(k, sims.shape[1])
    kth = -np.partition(-sims, kk - 1, axis=1)[:, kk - 1:kk]
    rows, cols = np.nonzero(sims >= kth)  # each row: its kk best and any equal to the kk-th
    vals = sims[rows, cols]
    order = np.lexsort((cols, -vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, rows)
    keep = rank < kk
    return cols[keep].reshape(-1, kk), vals[keep].reshape(-1, kk)


def sentence_chrf(hyp: str, ref: str) -> float:
    import sacrebleu

    return sacrebleu.sentence_chrf(hyp, [ref]).score


def closest_train(held_src: Sequence[str], held_tgt: Sequence[str], train_src: Sequence[str],
                  train_tgt: Sequence[str], k: int = DEFAULT_K,
                  indexes=None) -> List[Dict]:
    """For each held-out pair, its candidates' chrF on both sides and the closest one.

    Returns one dict per held-out pair: ``best`` (train index), ``score`` (max of the two
    sides' chrF for that train pair), ``src_chrf``, ``tgt_chrf`` and ``candidates``
    ({train index: max-side chrF}) for every retrieved candidate.
    """
    src_index, tgt_index = indexes or (CharNgramIndex(train_src), CharNgramIndex(train_tgt))
    cand_src = src_index.top_k(held_src, k)
    cand_tgt = tgt_index.top_k(held_tgt, k)
    results = []
    for i, (hs, ht) in enumerate(zip(held_src, held_tgt)):
        scored = {}
        for j in dict.fromkeys([*cand_src[i].tolist(), *cand_tgt[i].tolist()]):
            s, t = sentence_chrf(train_src[j], hs), sentence_chrf(train_tgt[j], ht)
            scored[j] = (max(s, t), s, t)
        best = max(scored, key=lambda j: (scored[j][0], j))  # a tie: the later verse
        results.append({"best": best, "score": scored[best][0], "src_chrf": scored[best][1],
                        "tgt_chrf": scored[best][2],
                        "candidates": {j: v[0] for j, v in scored.items()}})
    return results


def lookup_translations(held_src: Sequence[str], train_src: Sequence[str],
                        train_tgt: Sequence[str], k: int = DEFAULT_K, src_index=None) -> List[str]:
    """The lookup baseline: the target of the training pair with the most similar source
    (character n-gram retrieval, then sentence chrF on the source side)."""
    src_index = src_index or CharNgramIndex(train_src)
    cands = src_index.top_k(held_src, k)
    out = []
    for i, hs in enumerate(held_src):
        # a tie (the same source twice in train): the later verse, on every CPU
        best = max(cands[i].tolist(), key=lambda j: (sentence_chrf(train_src[j], hs), j))
        out.append(train_tgt[best])
    return out


def contaminated_train_indices(closest: Sequence[Dict], threshold: float = NEAR_DUPLICATE):
    """Train indices that are a near-duplicate (max-side chrF >= threshold) of a held-out pair."""
    return sorted({j for c in closest for j, s in c["candidates"].items() if s >= threshold})


def audit_split(held_src, held_tgt, train_src, train_tgt, k=DEFAULT_K, indexes=None,
                examples=5) -> Dict:
    from fairseq_shared.scoring import score

    indexes = indexes or (CharNgramIndex(train_src), CharNgramIndex(train_tgt))
    n = len(held_src)
    norm_src, norm_tgt = list(map(normalise_space, held_src)), list(map(normalise_space, held_tgt))
    train_src_set = set(map(normalise_space, train_src))
    train_tgt_set = set(map(normalise_space, train_tgt))
    train_pairs = set(zip(map(normalise_space, train_src), map(normalise_space, train_tgt)))
    closest = closest_train(held_src, held_tgt, train_src, train_tgt, k, indexes)
    scores = np.array([c["score"] for c in closest])
    lookup = lookup_translations(held_src, train_src, train_tgt, k, indexes[0])
    lookup_score = score(lookup, list(held_tgt))
    order = np.argsort(-scores)[:examples]
    return {
        "pairs": n,
        "exact_duplicates": {
            "source": sum(s in train_src_set for s in norm_src),
            "target": sum(t in train_tgt_set for t in norm_tgt),
            "pair": sum(p in train_pairs for p in zip(norm_src, norm_tgt)),
        },
        "near_duplicate_share": {str(t): float(np.mean(scores >= t)) if n else 0.0
                                 for t in THRESHOLDS},
        "near_duplicate_ids": [i for i in range(n) if scores[i] >= NEAR_DUPLICATE],
        "closest_examples": [
            {"held_out_line": int(i) + 1, "train_line": int(closest[i]["best"]) + 1,
             "chrf": round(float(scores[i]), 1),
             "src_chrf": round(closest[i]["src_chrf"], 1),
             "tgt_chrf": round(closest[i]["tgt_chrf"], 1),
             "held_out": [held_src[i], held_tgt[i]],
             "train": [train_src[closest[i]["best"]], train_tgt[closest[i]["best"]]]}
            for i in order],
        "lookup": {"bleu": lookup_score["bleu"], "chrf": lookup_score["chrf"],
                   "bleu_signature": lookup_score["bleu_signature"]},
        "lookup_hypotheses": lookup,
    }


def read_lines(path) -> List[str]:
    """The lines of a UTF-8 text file; bytes that are not UTF-8 raise AuditError naming the
    file, line and byte."""
    lines = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\n"))
            except UnicodeDecodeError as e:
                raise AuditError(f"{path}: line {number}: byte 0x{raw[e.start]:02x} at column "
                                 f"{e.start + 1} is not UTF-8 (the audit reads UTF-8 text; "
                                 f"re-encode the file, e.g. iconv -f latin1 -t utf-8)") from None
    return lines


def read_side_pair(src_path, tgt_path):
    """Both sides of a split, refused unless both exist, neither is empty and they have equal
    line counts (line i of one is the translation of line i of the other)."""
    missing = [str(p) for p in (src_path, tgt_path) if not Path(p).exists()]
    if missing:
        raise AuditError(f"{' and '.join(missing)}: missing (each split needs both sides)")
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    for path, lines in ((src_path, src), (tgt_path, tgt)):
        if not any(line.strip() for line in lines):
            raise AuditError(f"{path}: empty ({len(lines)} lines, none with text)")
    if len(src) != len(tgt):
        shorter, longer = (src_path, tgt_path) if len(src) < len(tgt) else (tgt_path, src_path)
        raise AuditError(f"{src_path} has {len(src)} lines, {tgt_path} {len(tgt)}: {shorter} "
                         f"ends before line {min(len(src), len(tgt)) + 1} of {longer}")
    return src, tgt


def target_file(raw: Path, split: str, tgt: str) -> Path:
    """``SPLIT.TGT``, or the first reference ``SPLIT.ref0.TGT`` of a recipe's test set."""
    plain = raw / f"{split}.{tgt}"
    return plain if plain.exists() else raw / f"{split}.ref0.{tgt}"


def audit_corpus(raw_dir, src="es", tgt="en", splits=("valid", "test"), k=DEFAULT_K) -> Dict:
    """The audit of every split in ``splits`` against train. Every present split is read and
    checked before any is scored (AuditError on a bad file); a split with neither side is
    listed under ``absent`` with the files looked for, never silently dropped."""
    raw = Path(raw_dir)
    train_src, train_tgt = read_side_pair(raw / f"train.{src}", raw / f"train.{tgt}")
    held, absent = {}, {}
    for split in splits:
        src_path, tgt_path = raw / f"{split}.{src}", target_file(raw, split, tgt)
        if not src_path.exists() and not tgt_path.exists():
            absent[split] = [src_path.name, f"{split}.{tgt}"]
            continue
        if not tgt_path.exists():
            raise AuditError(f"{raw / f'{split}.{tgt}'}: missing, beside {src_path} (each split "
                             f"needs both sides; or leave {split} out of --splits)")
        if not src_path.exists():
            raise AuditError(f"{src_path}: missing, beside {tgt_path} (each split needs both "
                             f"sides; or leave {split} out of --splits)")
        held[split] = read_side_pair(src_path, tgt_path)
    indexes = (CharNgramIndex(train_src), CharNgramIndex(train_tgt))
    report = {"raw_dir": str(raw), "src": src, "tgt": tgt, "train_pairs": len(train_src),
              "k": k, "retrieval": "TF-IDF char_wb 3-5-grams, cosine; then sentence chrF",
              "splits": {}, "absent": absent}
    for split, (held_src, held_tgt) in held.items():
        report["splits"][split] = audit_split(held_src, held_tgt, train_src, train_tgt, k, indexes)
    return report


def render_markdown(report: Dict) -> str:
    heads = " | ".join(f">= {t}" for t in THRESHOLDS)
    lines = [
        f"# Contamination audit of `{report['raw_dir']}`",
        "",
        f"Train: {report['train_pairs']:,} pairs. Near-duplicate = closest training pair's "
        f"sentence chrF on either side ({report['src']} vs {report['src']}, {report['tgt']} vs "
        f"{report['tgt']}); candidates: {report['retrieval']}, k = {report['k']} per side.",
        "",
        f"| split | pairs | exact src / tgt / pair | near-duplicates {heads} | lookup BLEU | "
        "lookup chrF |",
        "|---|---:|---|" + "---:|" * len(THRESHOLDS) + "---:|---:|",
    ]
    for split, r in report["splits"].items():
        e = r["exact_duplicates"]
        shares = " | ".join(f"{100 * r['near_duplicate_share'][str(t)]:.1f}%" for t in THRESHOLDS)
        lines.append(f"| {split} | {r['pairs']:,} | {e['source']} / {e['target']} / {e['pair']} | "
                     f"{shares} | {r['lookup']['bleu']:.2f} | {r['lookup']['chrf']:.2f} |")
    for split, files in report.get("absent", {}).items():
        lines.append(f"| {split} | absent: no {' or '.join(files)} |"
                     + " |" * (len(THRESHOLDS) + 3))
    lines += ["", "Lookup baseline: the target side of the training pair whose source is most "
              "similar (no model).", ""]
    for split, r in report["splits"].items():
        lines.append(f"## Closest pairs in {split}")
        lines.append("")
        for ex in r["closest_examples"]:
            lines.append(f"- chrF {ex['chrf']} ({report['src']} {ex['src_chrf']}, "
                         f"{report['tgt']} {ex['tgt_chrf']}): {split} line {ex['held_out_line']} "
                         f"`{ex['held_out'][1]}` ~ train line {ex['train_line']} "
                         f"`{ex['train'][1]}`")
        lines.append("")
    return "\n".join(lines)


def write_report(report: Dict, out_dir) -> Dict[str, str]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    slim = {**report, "splits": {s: {k: v for k, v in r.items() if k != "lookup_hypotheses"}
                                 for s, r in report["splits"].items()}}
    # a path that is not UTF-8 (its bytes read as surrogates) is written escaped, as \xff
    pipeline.write_text(out / "audit.json",
                        json.dumps(printable_data(slim), indent=1, ensure_ascii=False) + "\n")
    pipeline.write_text(out / "audit.md", printable(render_markdown(report)))
    for split, r in report["splits"].items():
        pipeline.write_text(out / f"lookup.{split}.{report['tgt']}",
                            "".join(h + "\n" for h in r["lookup_hypotheses"]))
    return {"json": str(out / "audit.json"), "md": str(out / "audit.md")}


def heldout_baseline(root, ids=None, split: str = "test", tgt: str = "en") -> Optional[Dict]:
    """The lookup baseline of a prepared corpus on the decoded sentences ``ids`` (all when
    None), and which of those positions are near-duplicates of training data; None when the
    corpus has no audit (``audit.json`` and ``lookup.SPLIT.TGT`` beside ``raw/``)."""
    from fairseq_shared.scoring import score

    root = Path(root)
    report_path, lookup_path = root / "audit.json", root / f"lookup.{split}.{tgt}"
    if not report_path.exists() or not lookup_path.exists():
        return None
    report = json.loads(report_path.read_text(encoding="utf-8"))
    if split not in report["splits"]:
        return None
    refs, lookup = read_lines(root / "raw" / f"{split}.{tgt}"), read_lines(lookup_path)
    ids = list(range(len(refs))) if ids is None else [int(i) for i in ids]
    near = set(report["splits"][split]["near_duplicate_ids"])
    scored = score([lookup[i] for i in ids], [refs[i] for i in ids])
    return {"bleu": scored["bleu"], "chrf": scored["chrf"], "sentences": len(ids),
            "near_duplicate_positions": [k for k, i in enumerate(ids) if i in near],
            "near_duplicate_share_70": report["splits"][split]["near_duplicate_share"]["70"]}


def score_without(hyps: Sequence[str], refs: Sequence[str], drop: Sequence[int]) -> Dict:
    """BLEU/chrF of ``hyps`` with the positions ``drop`` (near-duplicates) left out."""
    from fairseq_shared.scoring import score

    drop = set(drop)
    keep = [k for k in range(len(hyps)) if k not in drop]
    return score([hyps[k] for k in keep], [refs[k] for k in keep])


def test_contamination(report: Dict, split: str = "test") -> float:
    return report["splits"][split]["near_duplicate_share"][str(NEAR_DUPLICATE)]
