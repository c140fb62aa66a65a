"""Sequence-level knowledge distillation: a teacher translates a corpus's training split into a
new binarized corpus (docs/distill.md).

    fairseq-shared-distill --teacher CKPT [CKPT ...] --data CORPUS [--out DIR]
        [--trained-on DIR] [--beam 4] [--lenpen 1.0] [--max-len-a 1.2] [--max-len-b 10]
    python -m fairseq_shared.cli.distill ...
"""

import argparse
import shlex
import sys
from typing import Optional, Sequence

from fairseq_shared.cli.errors import command
from fairseq_shared.distill.run import DEFAULTS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fairseq-shared-distill", description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", required=True, nargs="+", metavar="CKPT",
                   help="a translation checkpoint of the plug-in (SAN included), or several: "
                   "their ensemble (decoded with fairseq)")
    p.add_argument("--data", required=True, help="the corpus the teacher was trained on: its "
                   "root (with bin/) or its binarized directory")
    p.add_argument("--out", help="directory of the distilled corpus (default: CORPUS/distilled; "
                   "the student trains on OUT/bin); a killed run resumes there with the same "
                   "command, and a second run into it is refused while the first holds it")
    p.add_argument("--trained-on", metavar="DIR",
                   help="the directory that holds the dict.*.txt files the teacher was trained "
                   "with, when its training data directory (recorded in the checkpoint) has "
                   "moved or is gone; without it such a teacher is refused")
    p.add_argument("--beam", type=int, default=DEFAULTS["beam"],
                   help="beam size of the teacher's search (default %(default)s)")
    p.add_argument("--lenpen", type=float, default=DEFAULTS["lenpen"],
                   help="length penalty of the teacher's search, as fairseq-generate's "
                   "(default %(default)s)")
    p.add_argument("--max-len-a", type=float, default=DEFAULTS["max_len_a"],
                   help="a hypothesis may be up to A x source length + B tokens long: A "
                   "(default %(default)s)")
    p.add_argument("--max-len-b", type=int, default=DEFAULTS["max_len_b"],
                   help="... and B (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=64,
                   help="sentences per batch, all of one source length (default %(default)s)")
    p.add_argument("--shard-size", type=int, default=1000,
                   help="training sentences per shard, each written when done: what a killed "
                   "run decodes again at most (default %(default)s)")
    p.add_argument("--check-sentences", type=int, default=20,
                   help="valid sentences the teacher's CTranslate2 export is checked on before "
                   "it decodes (default %(default)s)")
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads of either engine (default %(default)s)")
    p.add_argument("--post-process", default="auto",
                   choices=["auto", "sentencepiece", "subword_nmt", "none"],
                   help="detokenization for the teacher's valid BLEU (auto: sentencepiece when "
                   "the corpus root has spm.model)")
    return p


@command
def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from fairseq_shared.distill.run import distill

    settings = dict(beam=args.beam, lenpen=args.lenpen, max_len_a=args.max_len_a,
                    max_len_b=args.max_len_b)
    manifest = distill(args.teacher, args.data, args.out, settings, batch_size=args.batch_size,
                       shard_size=args.shard_size, check_sentences=args.check_sentences,
                       threads=args.threads, post=args.post_process, trained_on=args.trained_on,
                       command=shlex.join(["fairseq-shared-distill", *(argv or sys.argv[1:])]))
    valid = manifest["teacher_valid"]
    print(f"distilled {manifest['distilled_sentences']} of {manifest['train_sentences']} "
          f"training sentences with {manifest['engine']} into {manifest['bin']} (teacher's valid "
          f"BLEU {valid['bleu']:.2f}; skipped, source too long: "
          f"{manifest['skipped_source_too_long']['sentences']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
