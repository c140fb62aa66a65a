"""Contamination audit of a prepared parallel corpus: the command line of
``python -m fairseq_shared.cli.audit`` and ``fairseq-shared-audit``; what it does is
:mod:`fairseq_shared.data.audit` (printed by ``--help``)."""

import argparse
import sys
from pathlib import Path

from fairseq_shared.cli.arg_types import positive_int, unit_interval
from fairseq_shared.cli.errors import command
from fairseq_shared.data import audit as library
from fairseq_shared.errors import printable


@command
def main(argv=None):
    p = argparse.ArgumentParser(description=library.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("raw_dir", help="directory with {train,valid,test}.{src,tgt} plain text")
    p.add_argument("--src", default="es")
    p.add_argument("--tgt", default="en")
    p.add_argument("--splits", nargs="+", default=["valid", "test"])
    p.add_argument("-k", type=positive_int, default=library.DEFAULT_K,
                   help="candidates per side (default 10)")
    p.add_argument("--out", default=None, help="report directory (default: parent of RAW_DIR)")
    p.add_argument("--max-contamination", type=unit_interval, default=None,
                   help="exit 1 if the test split's near-duplicate share (chrF >= 70) is above "
                   "this fraction, e.g. 0.01")
    args = p.parse_args(argv)
    raw = Path(args.raw_dir)
    missing = [f"train.{l}" for l in (args.src, args.tgt) if not (raw / f"train.{l}").exists()]
    if missing:
        p.error(printable(f"RAW_DIR {raw}: missing {', '.join(missing)} (need plain-text "
                          f"{{train,valid,test}}.{{{args.src},{args.tgt}}}; see --src/--tgt)"))
    if args.max_contamination is not None and "test" not in args.splits:
        p.error(f"--max-contamination gates the test split, which --splits {' '.join(args.splits)} "
                "leaves out")
    # a bad corpus file raises AuditError: one line, exit 1 (cli/errors.py)
    report = library.audit_corpus(raw, args.src, args.tgt, args.splits, args.k)
    paths = library.write_report(report, args.out or raw.parent)
    print(printable(library.render_markdown(report).split("\n## ")[0]))
    print(printable(f"wrote {paths['md']} and {paths['json']}"))
    if args.max_contamination is not None and "test" not in report["splits"]:
        print(printable(f"audit: error: --max-contamination: no test split to check in {raw} "
                        f"({', '.join(report['absent'].get('test', ['test files']))} absent)"),
              file=sys.stderr)
        return 1
    if args.max_contamination is not None:
        share = library.test_contamination(report)
        if share > args.max_contamination:
            print(f"audit: error: test near-duplicate share {100 * share:.2f}% (chrF >= "
                  f"{library.NEAR_DUPLICATE}) is above --max-contamination "
                  f"{100 * args.max_contamination:.2f}%", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
