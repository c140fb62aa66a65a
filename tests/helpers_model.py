"""Build small fairseq_shared models in-process, the way fairseq-train would."""

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator
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


def random_batch(task, bsz=3, src_len=7, tgt_len=6, seed=0):
    """Left-padded sources and right-padded targets, as fairseq batches them."""
    g = torch.Generator().manual_seed(seed)
    d = task.source_dictionary
    src = torch.randint(d.nspecial, len(d), (bsz, src_len), generator=g)
    src[:, -1] = d.eos()
    src[0, :2] = d.pad()
    lengths = (src != d.pad()).sum(1)
    prev = torch.randint(d.nspecial, len(d), (bsz, tgt_len), generator=g)
    prev[:, 0] = d.eos()
    if bsz > 1:
        prev[1, -2:] = d.pad()
    return src, lengths, prev


def incremental_vs_full(model, task, **batch):
    """Decoder outputs step by step with a cache, and from one full forward pass.

    Right-padded target positions are ignored by the loss, and fairseq's stock decoder
    itself differs there between the two modes: only real positions are returned.
    """
    src, lengths, prev = random_batch(task, **batch)
    with torch.no_grad():
        full, _ = model(src, lengths, prev)
        encoder_out = model.encoder(src, src_lengths=lengths)
        state = {}
        steps = [
            model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0]
            for t in range(prev.size(1))
        ]
    keep = prev.ne(task.target_dictionary.pad())
    return torch.cat(steps, dim=1)[keep], full[keep], state


def beam_search(model, task, src, lengths, use_cache, beam=4):
    """fairseq's beam search; ``use_cache=False`` recomputes the whole prefix each step."""
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_b=8)
    generator.model.has_incremental = use_cache
    with torch.no_grad():
        return generator.forward({"net_input": {"src_tokens": src, "src_lengths": lengths}})


def cached_and_recomputed_beams(model, task, src, lengths, beam=4):
    """Pairs (cached, recomputed) of the hypotheses of every sentence and beam."""
    cached = beam_search(model, task, src, lengths, use_cache=True, beam=beam)
    recomputed = beam_search(model, task, src, lengths, use_cache=False, beam=beam)
    for hyps_a, hyps_b in zip(cached, recomputed):
        assert len(hyps_a) == len(hyps_b) == beam
        yield from zip(hyps_a, hyps_b)
