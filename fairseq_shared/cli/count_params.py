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

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY, FairseqLanguageModel
from fairseq.tasks.language_modeling import LanguageModelingTask
from fairseq.tasks.translation import TranslationTask

import fairseq_shared  # noqa: F401
from fairseq_shared.cli.errors import command
from fairseq_shared.models.config import describe_relaxation
from fairseq_shared.modules.lora import delta_parameter_count
from fairseq_shared.sharing import SharingConfigError


def build(arch: str, vocab: int, extra=()):
    dictionary = Dictionary()
    for i in range(vocab - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}")
    if issubclass(ARCH_MODEL_REGISTRY[arch], FairseqLanguageModel):
        task_cls, flags = LanguageModelingTask, ["--task", "language_modeling",
                                                 "--share-decoder-input-output-embed"]
    else:
        task_cls, flags = TranslationTask, ["--share-all-embeddings"]
    args = options.parse_args_and_arch(
        options.get_training_parser(), ["/unused", "--arch", arch, "--cpu", *flags, *extra]
    )
    return task_cls(args, dictionary, dictionary).build_model(args)


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


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
    untied = count(relaxed) - count(rigid) - deltas
    return (f" {count(relaxed) / 1e6:.2f}M | +{(count(relaxed) - count(rigid)) / 1e6:.2f}M "
            f"(deltas {deltas / 1e6:.2f}M, untied norms/biases {untied / 1e6:.2f}M) |")


@command
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archs", nargs="*", help="architectures (default: all of this package)")
    parser.add_argument("--vocab", type=int, default=32768, help="joint vocabulary size")
    parser.add_argument("--lora-rank", type=int, default=0, metavar="R",
                        help="also count with relaxed sharing: rank-R deltas in every stack "
                        "that ties layers (--{stack}-share-lora-rank R); 0: not")
    parser.add_argument("--untie-norms", action="store_true",
                        help="... and per-layer LayerNorms (--{stack}-untie-norms)")
    parser.add_argument("--untie-biases", action="store_true",
                        help="... and per-layer biases of tied Linears (--{stack}-untie-biases)")
    args = parser.parse_args(argv)
    if args.lora_rank < 0:
        parser.error(f"--lora-rank: '{args.lora_rank}' is not a rank; allowed: an integer >= 0")
    relax = (args.lora_rank, args.untie_norms, args.untie_biases)
    logging.disable(logging.INFO)
    torch.set_num_threads(1)
    archs = args.archs or ["transformer"] + [
        a for a, m in ARCH_MODEL_REGISTRY.items() if m.__module__.startswith("fairseq_shared")
    ]
    relaxed_header = f" relaxed{describe_relaxation(*relax)} | added |" if any(relax) else ""
    print(f"| architecture | layers (enc+dec) | parameters (joint vocab {args.vocab}) |"
          + relaxed_header)
    print("|---|---|---|" + ("---|---|" if any(relax) else ""))
    for arch in archs:
        model = build(arch, args.vocab)
        row = f"| `{arch}` | {layers(model)} | {count(model) / 1e6:.2f}M |"
        if any(relax):
            try:
                row += relaxed_cells(arch, args.vocab, model, *relax)
            except SharingConfigError as e:  # e.g. a rank above the layers' width
                parser.error(f"--lora-rank {args.lora_rank} for {arch}: {e}")
        print(row, flush=True)
        del model


if __name__ == "__main__":
    main()
