"""Decode a test set with one or more checkpoints, exactly as fairseq-generate, and time it.

    python -m fairseq_shared.cli.time_generate work/bible \\
        --checkpoint vanilla=ckpt/vanilla/checkpoint_last.pt \\
        --checkpoint cycle_rev=ckpt/cycle_rev/checkpoint_last.pt \\
        --baseline vanilla --warmup 1 --repeats 3 --threads 2 --out results/decode \\
        -- --beam 4 --lenpen 1.0 --batch-size 64 --cpu

Everything after ``--`` (or any option this command does not know) is a fairseq-generate
option and means exactly what it means there. ``DATA`` is a prepared corpus root
(``bin/``, ``raw/``, ``spm.model``: references and sentencepiece detokenization are found
automatically) or a fairseq binarized directory. Writes ``results.md``, ``results.csv``,
``results.json`` and ``hyp.<name>.txt`` to ``--out`` and prints the Markdown table. Exits
with status 3 if any sentence was not translated. See :mod:`fairseq_shared.timing`.
"""

import argparse
import logging
import os
import sys

from fairseq_shared.cli.arg_types import non_negative_int, positive_int
from fairseq_shared.cli.errors import command
from fairseq_shared.errors import printable


def build_parser():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("data", help="corpus root (with bin/, raw/, spm.model) or binarized dir")
    p.add_argument("--checkpoint", "-c", action="append", required=True, metavar="NAME=PATH",
                   help="a checkpoint to decode (repeat for several; NAME= is optional)")
    p.add_argument("--baseline", help="name the speed ratios are relative to (default: first)")
    p.add_argument("--warmup", type=non_negative_int, default=1, help="untimed warm-up passes (default 1)")
    p.add_argument("--warmup-batches", type=positive_int, default=None,
                   help="limit each warm-up pass to its first N batches (default: whole pass)")
    p.add_argument("--repeats", type=positive_int, default=3, help="timed passes per model (default 3)")
    p.add_argument("--sentences", type=positive_int, default=None, metavar="N",
                   help="decode only N sentences of the split, evenly spaced by id (default: "
                   "all; the split is fairseq-generate's --gen-subset, default test)")
    p.add_argument("--subset", default=None, help=argparse.SUPPRESS)  # refused: see parse
    p.add_argument("--force-lengths", default=None, metavar="{reference,L}",
                   help="force output lengths: 'reference' (forced decoding of the reference) "
                   "or an int L (every output L tokens + EOS)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch.set_num_threads (default: torch's)")
    p.add_argument("--script", action="store_true",
                   help="decode with fairseq's SequenceGenerator compiled by torch.jit.script "
                   "(same hypotheses; about 30%% less CPU time at batch 1, "
                   "results/archive/scripting/scripting.md)")
    p.add_argument("--references", default=None,
                   help="raw detokenized references (default <data>/raw/<gen-subset>.<tgt>)")
    p.add_argument("--out", default=None, help="directory for results.{md,csv,json}, hyps")
    p.add_argument("--trace", action="store_true",
                   help="also write trace.<name>.json to --out: per batch of the first timed "
                   "pass, the decoder steps, rows per step and output lengths")
    return p


def parse(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        k = argv.index("--")
        ours, gen = argv[:k], argv[k + 1:]
        args = build_parser().parse_args(ours)
    else:
        args, gen = build_parser().parse_known_args(argv)
    if args.subset is not None:  # --subset is a split in every command (arg_types.SUBSET_HELP)
        build_parser().error(f"--subset {args.subset}: the number of sentences to decode is "
                             "--sentences N; the split is fairseq-generate's --gen-subset "
                             "SPLIT (after --)")
    checkpoints = {}
    for i, spec in enumerate(args.checkpoint):
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = os.path.splitext(os.path.basename(os.path.dirname(os.path.abspath(spec))))[0] or f"model{i}", spec
        if name in checkpoints:
            name = f"{name}_{i}"
        checkpoints[name] = path
    return args, checkpoints, gen


@command
def main(argv=None):
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "WARNING").upper(),
                        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    args, checkpoints, gen = parse(argv)
    if args.out:
        from fairseq_shared.checkpoint_io import files_in, refuse_overwrite
        from fairseq_shared.timing.report import output_names

        refuse_overwrite(list(checkpoints.values()),
                         files_in(args.out, output_names(checkpoints, trace=args.trace)), {})
    from fairseq_shared.timing import DroppedSentencesError, benchmark, markdown_table, write_report

    try:
        report = benchmark(
            checkpoints, args.data, gen, baseline=args.baseline, warmup=args.warmup,
            warmup_batches=args.warmup_batches, repeats=args.repeats, subset=args.sentences,
            force=args.force_lengths, threads=args.threads, references=args.references,
            script=args.script,
            progress=lambda m: print(printable(m), file=sys.stderr, flush=True),
        )
    except DroppedSentencesError as e:
        print(f"ERROR: {printable(e)}", file=sys.stderr)
        return 3
    print(printable(markdown_table(report)))
    if args.out:
        paths = write_report(report, args.out, trace=args.trace)
        print(printable(f"wrote {', '.join(paths.values())}"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
