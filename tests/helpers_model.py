"""Build small fairseq_shared models in-process, the way fairseq-train would."""

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.tasks.translation import TranslationTask

import fairseq_shared  # noqa: F401  (registers the architectures)

TINY = [
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "24", "--decoder-ffn-embed-dim", "24",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
]


def make_dictionary(num_symbols=20):
    d = Dictionary()
    for i in range(num_symbols):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=1)
    return d


def parse_args(arch, flags=()):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, ["/nonexistent-data", "--arch", arch, "--cpu", *flags]
    )


def build_model(arch, flags=(), dictionary=None, seed=1):
    dictionary = dictionary or make_dictionary()
    args = parse_args(arch, flags)
    task = TranslationTask(args, dictionary, dictionary)
    torch.manual_seed(seed)
    return task.build_model(args), task
