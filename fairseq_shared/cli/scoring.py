"""Detokenized sacreBLEU and chrF of hypotheses: the command line of
``python -m fairseq_shared.cli.scoring``; what it does is :mod:`fairseq_shared.scoring`."""

import argparse
import json
import sys

from fairseq_shared import scoring as library
from fairseq_shared.checkpoint_io import write_text


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
        hyps = library.extract_hypotheses(_read(args.generate_output), args.post_process)
    else:
        hyps = [library.post_process(h, args.post_process) for h in _read(args.hyp)]
    if args.detok_lang:
        hyps = library.detokenize(hyps, args.detok_lang)
    if args.hyp_out:
        write_text(args.hyp_out, "".join(h + "\n" for h in hyps))
    result = library.score(hyps, [_read(r) for r in args.ref], lowercase=args.lowercase)
    print(result["bleu_verbose"])
    print(f"chrF2 = {result['chrf']:.2f}  {result['chrf_signature']}")
    if args.json_out:
        write_text(args.json_out, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
