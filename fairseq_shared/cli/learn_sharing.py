"""Propose a layer-to-set sharing pattern from how alike a trained model's layers are.

    python -m fairseq_shared.cli.learn_sharing CHECKPOINT --data DATA_BIN \\
        (--sets M | --threshold T) [--measure cka|weights] [--grouping adjacent|clustered] \\
        [--subset valid] [--max-sentences 400] [--out-dir DIR]

Prints the flags (``--encoder-share-strategy 1,1,2,2,3,3 --decoder-share-strategy ...``) to
train with or to convert the checkpoint with (``python -m fairseq_shared.cli.convert_sharing
CHECKPOINT OUT.pt FLAGS``), and writes ``DIR/sharing.json``, ``DIR/sharing.txt`` and
``DIR/similarity.png``.

What it does: :mod:`fairseq_shared.tools.learn_sharing` (printed below by ``--help``).
"""

import argparse
import logging
import os

import torch

from fairseq_shared.cli.arg_types import SUBSET_HELP, positive_int, unit_interval
from fairseq_shared.cli.errors import command
from fairseq_shared.tools import learn_sharing as library


@command
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__ + "\n" + library.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--data", help="data-bin directory (default: the one stored in the checkpoint)")
    choice = p.add_mutually_exclusive_group(required=True)
    choice.add_argument("--sets", type=positive_int, metavar="M", help="parameter sets per stack")
    choice.add_argument("--threshold", type=unit_interval, metavar="T",
                        help="a layer joins the group before it while its similarity to each "
                        "of the group's layers is >= T (clustered: while the best mean is >= T)")
    p.add_argument("--measure", choices=library.MEASURES, default=library.MEASURES[0])
    p.add_argument("--grouping", choices=library.GROUPINGS, default=library.GROUPINGS[0],
                   help="which pattern the flags give: adjacent groups (default) or clustered")
    p.add_argument("--subset", default="valid", help=SUBSET_HELP)
    p.add_argument("--max-sentences", type=positive_int, default=library.MAX_SENTENCES)
    p.add_argument("--max-tokens", type=positive_int, default=library.MAX_TOKENS,
                   help="batch size in tokens")
    p.add_argument("--out-dir", default="learn_sharing")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        record = library.learn_sharing(a.checkpoint, a.out_dir, a.data, a.sets, a.threshold,
                                       a.measure, a.grouping, a.subset, a.max_sentences,
                                       a.max_tokens)
    except library.LearnSharingError as e:
        p.error(str(e))
    print(record["flags"])


if __name__ == "__main__":
    main()
