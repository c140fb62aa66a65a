"""Print the unique parameter count of architectures at a reference size.

    python -m fairseq_shared.cli.count_params --vocab 32768 transformer transformer_cycle_rev ...
    python -m fairseq_shared.cli.count_params transformer_cycle_rev --lora-rank 64 --untie-biases

Builds each model for real (no training) with a joint dictionary of ``--vocab`` symbols
and ``--share-all-embeddings`` (a language model, ``transformer_lm*``: ``--task
language_modeling`` and ``--share-decoder-input-output-embed``), and counts each tied tensor
once, as fairseq-train logs.
With ``--lora-rank``/``--untie-norms``/``--untie-biases`` it also builds each architecture
with relaxed sharing in every stack that ties layers (``--{stack}-share-lora-rank`` ...) and
reports that count and what the relaxation adds (low-rank deltas, untied norms and biases).
"""

import argparse
import logging

from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY, FairseqLanguageModel

from fairseq_shared.cli.arg_types import int_at_least, non_negative_int
from fairseq_shared.cli.errors import command
from fairseq_shared.models import build as library
from fairseq_shared.sharing.assignment import SharingConfigError
from fairseq_shared.sharing.flags import describe_relaxation
from fairseq_shared.sharing.lora import delta_parameter_count
from fairseq_shared.sharing.tying import unique_parameter_count


def build(arch: str, vocab: int, extra=()):
    """``arch`` at its reference size over a joint dictionary of ``vocab`` symbols."""
    dictionary = Dictionary()
    for i in range(vocab - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}")
    if issubclass(ARCH_MODEL_REGISTRY[arch], FairseqLanguageModel):
        flags = ["--task", "language_modeling", "--share-decoder-input-output-embed"]
    else:
        flags = ["--share-all-embeddings"]
    return library.build(["/unused", "--arch", arch, "--cpu", *flags, *extra], dictionary)


def layers(model) -> str:
    if getattr(model, "encoder", None) is None:  # a language model
        return f"{len(model.decoder.layers)} (decoder only)"
    return f"{len(model.encoder.layers)}+{len(model.decoder.layers)}"


def relaxation_flags(model, rank: int, untie_norms: bool, untie_biases: bool):
    """The relaxed-sharing flags for every stack of ``model`` that ties layers."""
    flags = []
    for stack, sharing in getattr(model, "sharing", {}).items():
        if sharing.is_shared:
            flags += [f"--{stack}-share-lora-rank", str(rank)]
            flags += [f"--{stack}-untie-norms"] if untie_norms else []
            flags += [f"--{stack}-untie-biases"] if untie_biases else []
    return flags


def relaxed_cells(arch: str, vocab: int, rigid, rank: int, untie_norms: bool,
                  untie_biases: bool) -> str:
    """``| relaxed | added |`` cells; ``-`` for an architecture that ties nothing."""
    flags = relaxation_flags(rigid, rank, untie_norms, untie_biases)
    if not flags:
        return " - | - |"
    relaxed = build(arch, vocab, flags)
    deltas = delta_parameter_count(relaxed)
    total = unique_parameter_count(relaxed)
    added = total - unique_parameter_count(rigid)
    return (f" {total / 1e6:.2f}M | +{added / 1e6:.2f}M (deltas {deltas / 1e6:.2f}M, "
            f"untied norms/biases {(added - deltas) / 1e6:.2f}M) |")


@command
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archs", nargs="*", help="architectures (default: all of this package)")
    parser.add_argument("--vocab", type=int_at_least(Dictionary().nspecial), default=32768,
                        help="joint vocabulary size, its 4 special symbols included (default "
                        "32768)")
    parser.add_argument("--lora-rank", type=non_negative_int, default=0, metavar="R",
                        help="also count with relaxed sharing: rank-R deltas in every stack "
                        "that ties layers (--{stack}-share-lora-rank R); 0: not")
    parser.add_argument("--untie-norms", action="store_true",
                        help="... and per-layer LayerNorms (--{stack}-untie-norms)")
    parser.add_argument("--untie-biases", action="store_true",
                        help="... and per-layer biases of tied Linears (--{stack}-untie-biases)")
    args = parser.parse_args(argv)
    relax = (args.lora_rank, args.untie_norms, args.untie_biases)
    logging.disable(logging.INFO)
    ours = [a for a, m in ARCH_MODEL_REGISTRY.items() if m.__module__.startswith("fairseq_shared")]
    unknown = [a for a in args.archs if a not in ARCH_MODEL_REGISTRY]
    if unknown:
        parser.error(f"unknown architecture {', '.join(unknown)}; allowed: any fairseq "
                     f"architecture, e.g. transformer, or this package's: {', '.join(sorted(ours))}")
    archs = args.archs or ["transformer"] + ours
    relaxed_header = f" relaxed{describe_relaxation(*relax)} | added |" if any(relax) else ""
    print(f"| architecture | layers (enc+dec) | parameters (joint vocab {args.vocab}) |"
          + relaxed_header)
    print("|---|---|---|" + ("---|---|" if any(relax) else ""))
    for arch in archs:
        model = build(arch, args.vocab)
        row = f"| `{arch}` | {layers(model)} | {unique_parameter_count(model) / 1e6:.2f}M |"
        if any(relax):
            try:
                row += relaxed_cells(arch, args.vocab, model, *relax)
            except SharingConfigError as e:  # e.g. a rank above the layers' width
                parser.error(f"--lora-rank {args.lora_rank} for {arch}: {e}")
        print(row, flush=True)
        del model


if __name__ == "__main__":
    main()
