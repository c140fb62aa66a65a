"""Convert a trained model into one that shares parameters across layers.

    python -m fairseq_shared.cli.convert_sharing IN.pt OUT.pt \\
        [--encoder-share-strategy S] [--encoder-unique-layers M] [--encoder-share-scope C] \\
        [--encoder-share-lora-rank R] [--encoder-untie-norms] [--encoder-untie-biases] \\
        [--decoder-...] [--data DATA_BIN] [--report REPORT.json]

The sharing flags are the model's own (``fairseq-train --arch shared_transformer``); a stack
whose strategy is not given keeps the input's flags except those given. With a LoRA rank R
each position of a tied set starts with the best rank-R approximation of what it loses
(R = the model dimension, with --{stack}-untie-norms and --{stack}-untie-biases, reproduces
the input model). Prints, per stack and layer position, how far the layer's weights are from
what replaces them, and the flags to fine-tune OUT.pt with.

What it does: :mod:`fairseq_shared.tools.convert_sharing` (printed below by ``--help``).
"""

import argparse
import json
import logging

from fairseq_shared.checkpoint_io import refuse_overwrite, write_text
from fairseq_shared.cli.errors import command
from fairseq_shared.san.policy import PolicyError
from fairseq_shared.sharing.assignment import SharingConfigError
from fairseq_shared.sharing.flags import STACKS, add_sharing_args
from fairseq_shared.tools import convert_sharing as library


@command
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__ + "\n" + library.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint_in", metavar="IN.pt")
    p.add_argument("checkpoint_out", metavar="OUT.pt")
    add_sharing_args(p)
    p.set_defaults(**{f"{s}_untie_{k}": None for s in STACKS for k in ("norms", "biases")})
    p.add_argument("--data", help="data-bin directory, if it moved since training")
    p.add_argument("--report", metavar="JSON", help="also write the report here")
    a = p.parse_args(argv)
    refuse_overwrite([a.checkpoint_in], [a.checkpoint_out] + ([a.report] if a.report else []),
                     {a.report: "--report"})
    logging.basicConfig(level=logging.INFO)
    changes = {name: getattr(a, name, None) for name in library.change_names()}
    try:
        report = library.convert_checkpoint(a.checkpoint_in, a.checkpoint_out, changes, a.data)
    except (library.ConversionError, SharingConfigError, PolicyError) as e:
        p.error(str(e))
    if a.report:
        write_text(a.report, json.dumps(report, indent=1))
    print(library.format_report(report["stacks"]))
    print(f"wrote {a.checkpoint_out}; fine-tune it with: --arch shared_transformer "
          f"{report['flags']}")


if __name__ == "__main__":
    main()
