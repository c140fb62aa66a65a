"""Build the tiny synthetic corpus of :mod:`fairseq_shared.data.toydata` (tests, ``--budget
tiny``) and print where it is.

    python -m fairseq_shared.cli.toydata [OUT]     # default work/toy
"""

import argparse

from fairseq_shared.data import toydata as library


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=library.__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", default="work/toy", help="output directory")
    print(library.build_toy_corpus(p.parse_args(argv).out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
