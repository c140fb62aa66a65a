"""Build the English Bible language-model corpus: the command line of
``python -m fairseq_shared.cli.bible_lm``; what it does is :mod:`fairseq_shared.data.bible_lm`
(printed by ``--help``)."""

import argparse
import sys

from fairseq_shared.data import bible_lm as library


def main(argv=None):
    p = argparse.ArgumentParser(description=library.__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bible", default="work/bible",
                   help="a corpus built by python -m fairseq_shared.cli.bible")
    p.add_argument("--out", default="work/bible_lm", help="output directory")
    args = p.parse_args(argv)
    try:
        library.build(args.bible, args.out)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
