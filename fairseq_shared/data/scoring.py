"""Detokenized sacreBLEU / chrF, and hypotheses out of ``fairseq-generate`` output.

    python -m fairseq_shared.data.scoring --generate-output gen.txt --ref test.en \
        [--post-process sentencepiece|subword_nmt|none] [--detok-lang en] [--hyp-out hyp.txt]
    python -m fairseq_shared.data.scoring --hyp hyp.txt --ref test.en
"""

import argparse
import json
import re
import sys

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


def _read(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def main(argv=None):
    p = argparse.ArgumentParser(description="detokenized sacreBLEU and chrF")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--generate-output", help="fairseq-generate stdout")
    src.add_argument("--hyp", help="plain hypotheses, one per line")
    p.add_argument("--ref", required=True, nargs="+",
                   help="detokenized reference file(s), one sentence per line")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU/chrF")
    p.add_argument("--post-process", default="none",
                   choices=["none", "sentencepiece", "subword_nmt"])
    p.add_argument("--detok-lang", default=None, help="Moses-detokenize hypotheses first")
    p.add_argument("--hyp-out", default=None, help="write the final hypotheses here")
    p.add_argument("--json-out", default=None)
    args = p.parse_args(argv)
    if args.generate_output:
        hyps = extract_hypotheses(_read(args.generate_output), args.post_process)
    else:
        hyps = [post_process(h, args.post_process) for h in _read(args.hyp)]
    if args.detok_lang:
        hyps = detokenize(hyps, args.detok_lang)
    if args.hyp_out:
        with open(args.hyp_out, "w", encoding="utf-8") as f:
            f.writelines(h + "\n" for h in hyps)
    result = score(hyps, [_read(r) for r in args.ref], lowercase=args.lowercase)
    print(result["bleu_verbose"])
    print(f"chrF2 = {result['chrf']:.2f}  {result['chrf_signature']}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
