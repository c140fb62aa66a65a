"""Build the offline Spanish->English Bible corpus: the command line of
``python -m fairseq_shared.cli.bible``; what it does is :mod:`fairseq_shared.data.bible`
(printed by ``--help``)."""

import argparse
import sys

from fairseq_shared.data import bible as library


def main(argv=None):
    p = argparse.ArgumentParser(description=library.__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--test-book", nargs="+", default=list(library.TEST_BOOKS),
                   help="OSIS book name(s) (default John)")
    p.add_argument("--valid-book", nargs="+", default=list(library.VALID_BOOKS),
                   help="OSIS book name(s) (default Acts)")
    p.add_argument("--max-test-contamination", type=float,
                   default=library.MAX_TEST_CONTAMINATION,
                   help="stop if more than this fraction of test pairs has a training "
                   "near-duplicate (sentence chrF >= 70, either side); default 0.01")
    p.add_argument("--books", nargs="+", default=None,
                   help="use only these books (a small corpus for tests)")
    p.add_argument("--sword-path", default=library.SWORD_PATH)
    args = p.parse_args(argv)
    try:
        library.build(args.out, args.vocab_size, args.test_book, args.valid_book, args.books,
              args.sword_path, max_test_contamination=args.max_test_contamination)
    except (library.MissingModulesError, library.ContaminationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
