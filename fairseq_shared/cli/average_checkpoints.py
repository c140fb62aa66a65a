"""Average the parameters of fairseq checkpoints (fairseq's ``scripts/average_checkpoints.py``).

fairseq's script is not in the pip package; this is a drop-in with the same flags::

    fairseq-shared-average --inputs ckpt/ --num-epoch-checkpoints 5 --output avg.pt
    python -m fairseq_shared.cli.average_checkpoints --inputs a.pt b.pt c.pt --output avg.pt

Differences from fairseq's script:

* checkpoints are loaded with ``torch.load(weights_only=True)`` (types allowed by
  :mod:`fairseq_shared.compat`); a checkpoint that needs anything else is refused, and so
  is an ``--output`` that is one of the inputs;
* tied tensors: keys that share one tensor in a checkpoint (fairseq's
  ``--share-all-embeddings``, or a state dict saved with alias keys) are averaged once and
  written as one shared tensor, so ties survive and the file does not grow. The tie
  structure must be the same in every input. (``shared_transformer`` checkpoints store each
  tied layer tensor once, so they carry no alias keys at all.)
* sums are accumulated in float64, then cast back (fp16 becomes fp32, as in fairseq);
* ``--checkpoint-upper-bound`` can be combined with ``--num-*-checkpoints`` (in fairseq's
  script an argparse group made that impossible), and bad flags are reported by name.

The output keeps everything else from the first input (for ``--num-*-checkpoints``: the
newest), as fairseq's script does, and is written atomically (``checkpoint_io.save``).
"""

import argparse
import os
import sys
from typing import Optional, Sequence

from fairseq_shared.checkpoint_io import refuse_overwrite, save
from fairseq_shared.cli.errors import command
from fairseq_shared.tools.averaging import AverageError, average_checkpoints, last_n_checkpoints


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-shared-average",
        description="Average the parameters of fairseq checkpoints into a new checkpoint "
        "(safe loading; tied tensors averaged once and kept tied).",
    )
    parser.add_argument("--inputs", required=True, nargs="+", metavar="PATH",
                        help="checkpoint files, or with --num-*-checkpoints one directory")
    parser.add_argument("--output", required=True, metavar="FILE",
                        help="where to write the averaged checkpoint")
    num = parser.add_mutually_exclusive_group()
    num.add_argument("--num-epoch-checkpoints", type=int, metavar="N",
                     help="average the last N checkpoint<EPOCH>.pt files in the --inputs directory")
    num.add_argument("--num-update-checkpoints", type=int, metavar="N",
                     help="average the last N checkpoint_<EPOCH>_<UPDATE>.pt files in the "
                     "--inputs directory")
    parser.add_argument("--checkpoint-upper-bound", type=int, metavar="K",
                        help="with --num-*-checkpoints: only use epochs (or updates) <= K; e.g. "
                        "--num-epoch-checkpoints 10 --checkpoint-upper-bound 50 averages 41..50")
    return parser


@command
def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    n = args.num_epoch_checkpoints if args.num_epoch_checkpoints is not None else (
        args.num_update_checkpoints
    )
    flag = "--num-epoch-checkpoints" if args.num_epoch_checkpoints is not None else (
        "--num-update-checkpoints"
    )
    if args.checkpoint_upper_bound is not None and n is None:
        parser.error("--checkpoint-upper-bound needs --num-epoch-checkpoints or "
                     "--num-update-checkpoints")
    if n is not None:
        if n < 1:
            parser.error(f"{flag} must be >= 1 (got {n})")
        if len(args.inputs) != 1:
            parser.error(f"{flag} needs exactly one directory in --inputs "
                         f"(got {len(args.inputs)} paths)")
    output_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(output_dir):
        parser.error(f"--output: directory '{output_dir}' does not exist")
    try:
        inputs = args.inputs
        if n is not None:
            inputs = last_n_checkpoints(
                args.inputs[0], n, args.num_update_checkpoints is not None,
                upper_bound=args.checkpoint_upper_bound,
            )
        refuse_overwrite(inputs, [args.output], {args.output: "--output"})
        print("averaging checkpoints:", " ".join(inputs))
        new_state = average_checkpoints(inputs)
    except AverageError as error:
        parser.error(str(error))

    save(new_state, args.output)
    print(f"Finished writing averaged checkpoint to {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
