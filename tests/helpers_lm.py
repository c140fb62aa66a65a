"""Build small (shared) language models in-process, the way fairseq-train would, and decode
them the way fairseq-generate does for ``--task language_modeling``."""

import torch
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.sequence_scorer import SequenceScorer
from fairseq.tasks.language_modeling import LanguageModelingTask

import fairseq_shared  # noqa: F401  (registers the architectures)
from helpers_model import make_dictionary

TINY_LM = [
    "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "24",
    "--decoder-attention-heads", "2",
    "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
]


def lm_sharing_flags(strategy, m, scope, layers=4):
    flags = ["--decoder-layers", str(layers), "--decoder-share-strategy", strategy,
             "--decoder-share-scope", scope]
    return flags + (["--decoder-unique-layers", m] if m is not None else [])


def parse_lm_args(arch, flags=()):
    return options.parse_args_and_arch(
        options.get_training_parser(),
        ["/nonexistent-data", "--task", "language_modeling", "--arch", arch, "--cpu", *flags],
    )


def build_lm(arch, flags=(), dictionary=None, seed=1, via_omegaconf=False):
    """``via_omegaconf``: as fairseq-train builds it, from the config that
    ``convert_namespace_to_omegaconf`` makes of the parsed flags (only dataclass fields
    survive it); otherwise from the parsed ``argparse.Namespace`` (fairseq's legacy path)."""
    dictionary = dictionary or make_dictionary()
    args = parse_lm_args(arch, flags)
    if via_omegaconf:
        cfg = convert_namespace_to_omegaconf(args)
        task_cfg, model_cfg = cfg.task, cfg.model
    else:
        task_cfg = model_cfg = args
    task = LanguageModelingTask(task_cfg, dictionary, dictionary)
    torch.manual_seed(seed)
    return task.build_model(model_cfg), task


def random_tokens(task, bsz=3, length=7, seed=0, pad_last=True):
    """Right-padded token batches, as fairseq's MonolingualDataset collates them."""
    g = torch.Generator().manual_seed(seed)
    d = task.source_dictionary
    tokens = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    tokens[:, 0] = d.eos()  # a sentence's source starts after the previous eos
    if pad_last and bsz > 1:
        tokens[-1, -2:] = d.pad()
    return tokens


def incremental_vs_full(model, tokens, pad):
    """Decoder outputs step by step with a cache, and from one full forward pass (real,
    non-pad positions only)."""
    with torch.no_grad():
        full, _ = model(tokens)
        state = {}
        steps = [
            model.decoder(tokens[:, : t + 1], incremental_state=state)[0]
            for t in range(tokens.size(1))
        ]
    keep = tokens.ne(pad)
    return torch.cat(steps, dim=1)[keep], full[keep], state


def generation_args(*flags, data="/nonexistent-data"):
    """fairseq-generate's arguments for ``--task language_modeling`` on ``data``."""
    return options.parse_args_and_arch(
        options.get_generation_parser(default_task="language_modeling"),
        [str(data), "--task", "language_modeling", *flags],
    )


def generate(model, task, prefix, use_cache, flags=(), seed=0):
    """``task.inference_step`` (what fairseq-generate runs) with the generator that
    ``task.build_generator`` makes of ``flags``; ``use_cache=False`` recomputes the whole
    prefix at every step."""
    generator = task.build_generator([model], generation_args(*flags))
    generator.model.has_incremental = use_cache
    sample = {"net_input": {"src_tokens": prefix, "src_lengths": prefix.ne(1).sum(1)}}
    torch.manual_seed(seed)
    return task.inference_step(generator, [model], sample)


def teacher_forced_scores(model, task, hypothesis_tokens):
    """fairseq's SequenceScorer (no cache, one forward pass) on a hypothesis ending in eos:
    the log-probability of each of its tokens after an initial eos."""
    eos = task.source_dictionary.eos()
    target = hypothesis_tokens[None]
    source = torch.cat([torch.tensor([[eos]]), target[:, :-1]], dim=1)
    sample = {"net_input": {"src_tokens": source, "src_lengths": torch.tensor([source.size(1)])},
              "target": target}
    hypos = SequenceScorer(task.target_dictionary).generate([model], sample)
    return hypos[0][0]["positional_scores"]
