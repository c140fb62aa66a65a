"""The paper's joint procedure (LEARNTOSHARE, Xiao et al. 2019) as one driver over fairseq-train.

    python -m fairseq_shared.cli.learn_to_share DATA_BIN --work-dir DIR \\
        --round-updates 2000 --final-updates 20000 [--max-rounds 5] [--theta 0.9] \\
        [--similarity per_head] [--subset valid] -- <fairseq-train flags: --arch ... --lr ...>

What it does: :mod:`fairseq_shared.tools.policy_rounds` (printed below by ``--help``).
"""

import argparse
import json
import logging
import sys
from typing import List

from fairseq_shared.cli.arg_types import SUBSET_HELP, positive_int, unit_interval
from fairseq_shared.cli.errors import command
from fairseq_shared.tools import learn_policy
from fairseq_shared.tools import policy_rounds as library


@command
def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    train_flags: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, train_flags = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__ + "\n" + library.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--work-dir", required=True)
    p.add_argument("--round-updates", type=positive_int, required=True)
    p.add_argument("--final-updates", type=positive_int, required=True)
    p.add_argument("--max-rounds", type=positive_int, default=library.MAX_ROUNDS)
    p.add_argument("--theta", type=unit_interval, default=learn_policy.THETA)
    p.add_argument("--similarity", choices=learn_policy.SIMILARITIES,
                   default=learn_policy.SIMILARITIES[0])
    p.add_argument("--subset", default="valid", help=SUBSET_HELP)
    p.add_argument("--max-sentences", type=positive_int, default=learn_policy.MAX_SENTENCES)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    result = library.learn_to_share(a.data, a.work_dir, train_flags, a.round_updates, a.final_updates,
                            a.max_rounds, a.theta, a.similarity, a.subset, a.max_sentences)
    print(json.dumps({k: result[k] for k in ("converged", "final_policy", "final_checkpoint")}))


if __name__ == "__main__":
    main()
