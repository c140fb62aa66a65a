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


UNSET = "unset: the checkpoint's own"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__ + "\n" + library.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint_in", help="a trained translation checkpoint of the plug-in's "
                   "model (--arch shared_transformer and its named architectures)")
    p.add_argument("checkpoint_out", help="where to write the converted checkpoint (not the "
                   "input; train it on with --reset-optimizer)")
    p.add_argument("--san-self-policy", metavar="BLOCKS",
                   help="the new decoder self-attention policy: block sizes summing to the "
                   f"decoder's layers, e.g. 1,5 (all 1s: no sharing); {UNSET}")
    p.add_argument("--san-cross-policy", metavar="BLOCKS",
                   help="the new decoder encoder-decoder attention policy: block sizes summing "
                   f"to the decoder's layers, e.g. 2,2,2 (all 1s: no sharing); {UNSET}")
    p.add_argument("--san-cross-reuse", choices=CROSS_REUSE,
                   help="where encoder-decoder followers reuse the leader's attention: output "
                   f"(after its output projection) or context (before it); {UNSET}")
    p.add_argument("--san-encoder-policy", metavar="BLOCKS",
                   help="the new encoder self-attention policy: block sizes summing to the "
                   f"encoder's layers (all 1s: no sharing); {UNSET}")
    p.add_argument("--data", help="data-bin directory with the dictionaries, if it moved since "
                   "training (default: the checkpoint's own)")
    return p


@command
def main(argv=None):
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    print(library.convert_checkpoint(a.checkpoint_in, a.checkpoint_out, a.san_self_policy,
                             a.san_cross_policy, a.san_cross_reuse, a.san_encoder_policy, a.data))


if __name__ == "__main__":
    main()
