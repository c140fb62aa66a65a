"""TorchScript: fairseq's SequenceGenerator scripted over every family (SAN included)
finds the eager generator's hypotheses.

Scores agree to float rounding, not bit for bit: eager PyTorch runs the encoder's
attention through its fused kernel, which fairseq skips under TorchScript
(``torch.jit.is_scripting()``); fairseq's own Transformer shows the same differences.
With that path forced off in eager mode too, the scores are bit-equal (last test).
"""

import functools
import os
import sys

import pytest
import torch
from fairseq.modules import MultiheadAttention
from fairseq.sequence_generator import SequenceGenerator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))

from make_regression_fixture import CONFIGS, build  # noqa: E402
from helpers_model import random_batch  # noqa: E402

from fairseq_shared.san.relay import Relay  # noqa: E402

torch.set_num_threads(1)


def generate(generator, task, bsz=3):
    src, lengths, _ = random_batch(task, bsz=bsz, seed=5)
    with torch.no_grad():
        return generator.forward({"net_input": {"src_tokens": src, "src_lengths": lengths}})


@functools.lru_cache(maxsize=None)  # scripting takes seconds: once per configuration
def eager_and_scripted(name):
    model, task = build(name)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=8)
    eager = generate(generator, task)
    scripted = torch.jit.script(generator)
    return model, task, generator, scripted, eager, generate(scripted, task)


def pairs(a, b):
    assert len(a) == len(b)
    for hyps_a, hyps_b in zip(a, b):
        assert len(hyps_a) == len(hyps_b) == 4
        yield from zip(hyps_a, hyps_b)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_scripted_generator_finds_the_eager_hypotheses(name):
    model, task, generator, scripted, eager, script_hyps = eager_and_scripted(name)
    for a, b in pairs(eager, script_hyps):
        assert torch.equal(a["tokens"], b["tokens"])
        torch.testing.assert_close(a["score"], b["score"], rtol=0, atol=1e-5)
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"], rtol=0, atol=1e-5)
        torch.testing.assert_close(a["attention"], b["attention"], rtol=0, atol=1e-5)
    # the eager model still decodes as before (its relays were swapped for scripted ones)
    for a, b in pairs(eager, generate(generator, task)):
        assert torch.equal(a["tokens"], b["tokens"]) and torch.equal(a["score"], b["score"])


def test_one_scripted_relay_per_stack_is_shared_by_leader_and_followers():
    model, _, _, scripted, _, _ = eager_and_scripted("san_context_prenorm_encoder")
    relays = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if name.endswith(".relay"):
            relays.setdefault(name.split(".")[0], set()).add(id(module))
    assert {stack: len(ids) for stack, ids in relays.items()} == {"encoder": 1, "decoder": 1}
    assert all(
        isinstance(m, torch.jit.ScriptModule)
        for n, m in model.named_modules(remove_duplicate=False)
        if n.endswith(".relay")
    )
    assert not any(isinstance(m, Relay) for m in model.modules())


@pytest.mark.parametrize("name", ["vanilla", "san_context_prenorm_encoder"])
def test_scores_are_bit_equal_on_fairseqs_own_attention_path(name):
    model, task = build(name)
    for module in model.modules():
        if isinstance(module, MultiheadAttention):
            module.skip_embed_dim_check = True  # no fused kernel in eager mode either
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=8)
    eager = generate(generator, task)
    # the scripted generator of the same weights: under TorchScript the fused kernel is
    # skipped whatever skip_embed_dim_check says, so compiling this one again would be the same
    scripted = eager_and_scripted(name)[5]
    for a, b in pairs(eager, scripted):
        assert torch.equal(a["tokens"], b["tokens"])
        assert torch.equal(a["score"], b["score"])
        assert torch.equal(a["positional_scores"], b["positional_scores"])
