"""Change the SAN policy of a trained checkpoint, explicitly.

    python -m fairseq_shared.cli.convert_policy IN.pt OUT.pt \\
        --san-self-policy 1,5 --san-cross-policy 2,2,2 [--san-cross-reuse output] \\
        [--data DATA_BIN]

What it does: :mod:`fairseq_shared.tools.convert_policy` (printed below by ``--help``).
"""

import argparse
import logging

from fairseq_shared.cli.errors import command
from fairseq_shared.san.flags import CROSS_REUSE
from fairseq_shared.tools import convert_policy as library


@command
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__ + "\n" + library.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint_in")
    p.add_argument("checkpoint_out")
    p.add_argument("--san-self-policy")
    p.add_argument("--san-cross-policy")
    p.add_argument("--san-cross-reuse", choices=CROSS_REUSE)
    p.add_argument("--san-encoder-policy")
    p.add_argument("--data", help="data-bin directory, if it moved since training")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    print(library.convert_checkpoint(a.checkpoint_in, a.checkpoint_out, a.san_self_policy,
                             a.san_cross_policy, a.san_cross_reuse, a.san_encoder_policy, a.data))


if __name__ == "__main__":
    main()
