"""Detokenized sacreBLEU / chrF, and hypotheses out of ``fairseq-generate`` output.

    python -m fairseq_shared.cli.scoring --generate-output gen.txt --ref test.en \
        [--post-process sentencepiece|subword_nmt|none] [--detok-lang en] [--hyp-out hyp.txt]
    python -m fairseq_shared.cli.scoring --hyp hyp.txt --ref test.en
"""

import re

_H_LINE = re.compile(r"^H-(\d+)\t([^\t]*)\t?(.*)$")


def post_process(text, kind):
    """Undo subword splitting the way fairseq's ``--post-process`` does."""
    if kind in (None, "none", ""):
        return text.strip()
    if kind == "sentencepiece":
        return text.replace(" ", "").replace("\u2581", " ").strip()
    if kind == "subword_nmt":
        return (text + " ").replace("@@ ", "").rstrip()
    raise ValueError(f"unknown post-process {kind!r}")


def extract_hypotheses(lines, post="none"):
    """Hypotheses of ``fairseq-generate`` output, ordered by sentence id.

    Reads the ``H-<id>\\t<score>\\t<tokens>`` lines (first hypothesis per id when ``--nbest`` > 1),
    and applies ``post`` ('sentencepiece', 'subword_nmt' or 'none' when generate already did
    ``--post-process``). Raises if ids are missing (fairseq-generate dropped sentences).
    """
    hyps = {}
    for line in lines:
        m = _H_LINE.match(line.rstrip("\n"))
        if m:
            hyps.setdefault(int(m.group(1)), m.group(3))
    if not hyps:
        return []
    ids = sorted(hyps)
    if ids != list(range(len(ids))):
        missing = sorted(set(range(ids[-1] + 1)) - set(ids))
        raise ValueError(f"generate output lacks sentence ids {missing[:10]} "
                         "(use --required-batch-size-multiple 1)")
    return [post_process(hyps[i], post) for i in ids]


_AGGRESSIVE = re.compile(r" @([-,.])@ ")


def detokenize(lines, lang):
    """Moses detokenization (sacremoses), for recipes whose text was Moses-tokenized; also
    undoes the aggressive hyphen splitting (``a @-@ b`` -> ``a-b``)."""
    from sacremoses import MosesDetokenizer

    md = MosesDetokenizer(lang=lang)
    return [md.detokenize(_AGGRESSIVE.sub(r"\1", line).split()) for line in lines]


def score(hyps, refs, lowercase=False, digits=2):
    """Corpus BLEU and chrF (sacreBLEU defaults: 13a tokenization on detokenized text): the
    package's one sacreBLEU wrapper.

    ``refs``: one reference per hypothesis, or a list of such lists (several references).
    ``digits``: BLEU and chrF rounded to this many decimals; ``None`` keeps sacreBLEU's full
    precision (the timing reports)."""
    import sacrebleu

    ref_sets = [refs] if refs and isinstance(refs[0], str) else list(refs)
    for r in ref_sets:
        if len(hyps) != len(r):
            raise ValueError(f"{len(hyps)} hypotheses for {len(r)} references")
    bleu = sacrebleu.metrics.BLEU(lowercase=lowercase)
    chrf = sacrebleu.metrics.CHRF(lowercase=lowercase)
    b = bleu.corpus_score(hyps, ref_sets)
    c = chrf.corpus_score(hyps, ref_sets)
    rnd = (lambda x: x) if digits is None else (lambda x: round(x, digits))
    return {
        "bleu": rnd(b.score), "bleu_signature": str(bleu.get_signature()),
        "bleu_verbose": str(b),
        "chrf": rnd(c.score), "chrf_signature": str(chrf.get_signature()),
        "n": len(hyps),
    }
