"""Learn a SAN policy from a trained model's attention on held-out data (Xiao et al. 2019).

    python -m fairseq_shared.cli.learn_policy CHECKPOINT --data DATA_BIN [--subset valid] \\
        [--theta 0.9] [--similarity per_head|head_avg] [--max-sentences 400] --out-dir DIR

Runs the decoder with teacher forcing on the references of ``--subset`` and records every
decoder layer's attention distributions, self and encoder-decoder, per head. For every
pair of layers it computes the mean Jensen-Shannon divergence (log base 2) over heads,
batch items and non-pad target positions, both per head (each head against the same
head of the other layer: what SAN shares) and between head-averaged distributions.
``mu = 1 - JS``; blocks are formed greedily from layer 1, largest block with mean pairwise
similarity > theta first (see :mod:`fairseq_shared.san.policy`). Which of the two similarities
forms the policy is ``--similarity`` (default ``per_head``). ``--sweep 0.7,0.8,0.9`` also
records the policy every listed threshold gives with either similarity (``DIR/sweep.md``).

Writes ``DIR/policy.json`` (policies, matrices, settings), ``DIR/policy.txt`` (the
fairseq-train flags) and ``DIR/similarity.png`` (JS heat-maps in the style of the
paper's Figure 2: self-attention and encoder-decoder attention, per head and averaged).

In a model that already shares attention, a follower's distributions *are* its leader's
(JS 0), so re-learning can merge blocks but does not split one. That is what the
paper's LEARNTOSHARE loop re-learns from (the followers own no Q/K to compare with).
"""

import argparse
import logging
import os

import torch

from fairseq_shared.cli.arg_types import (SUBSET_HELP, positive_int, unit_interval,
                                          unit_interval_list)
from fairseq_shared.cli.errors import command
from fairseq_shared.san.policy import format_policy
from fairseq_shared.tools import learn_policy as library


@command
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--data", help="data-bin directory (default: the one stored in the checkpoint)")
    p.add_argument("--subset", default="valid", help=SUBSET_HELP)
    p.add_argument("--theta", type=unit_interval, default=library.THETA)
    p.add_argument("--similarity", choices=library.SIMILARITIES,
                   default=library.SIMILARITIES[0])
    p.add_argument("--max-sentences", type=positive_int, default=library.MAX_SENTENCES)
    p.add_argument("--max-tokens", type=positive_int, default=library.MAX_TOKENS)
    p.add_argument("--sweep", type=unit_interval_list, default=None, metavar="THETAS",
                   help="also record the policies these comma-separated thresholds would give, "
                   "for both similarity kinds (DIR/sweep.md, 'sweep' in policy.json)")
    p.add_argument("--out-dir", required=True)
    a = p.parse_args(argv)
    thetas = a.sweep or None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    policy = library.learn_policy(a.checkpoint, a.out_dir, a.data, a.subset, a.theta, a.similarity,
                          a.max_sentences, a.max_tokens, thetas)
    print(" ".join(f"--san-{k}-policy {format_policy(v)}" for k, v in policy.items()))


if __name__ == "__main__":
    main()
