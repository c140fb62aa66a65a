"""Print the unique parameter count of architectures at a reference size.

    python -m fairseq_shared.cli.count_params --vocab 32768 transformer transformer_cycle_rev ...

Builds each model for real (no training) with a joint dictionary of ``--vocab`` symbols
and ``--share-all-embeddings`` (a language model, ``transformer_lm*``: ``--task
language_modeling`` and ``--share-decoder-input-output-embed``), and counts each tied tensor
once, as fairseq-train logs.
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archs", nargs="*", help="architectures (default: all of this package)")
    parser.add_argument("--vocab", type=int, default=32768, help="joint vocabulary size")
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)
    torch.set_num_threads(1)
    archs = args.archs or ["transformer"] + [
        a for a, m in ARCH_MODEL_REGISTRY.items() if m.__module__.startswith("fairseq_shared")
    ]
    print(f"| architecture | layers (enc+dec) | parameters (joint vocab {args.vocab}) |")
    print("|---|---|---|")
    for arch in archs:
        model = build(arch, args.vocab)
        print(f"| `{arch}` | {layers(model)} | {count(model) / 1e6:.2f}M |", flush=True)
        del model


if __name__ == "__main__":
    main()
