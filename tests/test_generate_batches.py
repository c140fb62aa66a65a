"""fairseq-generate translates every test sentence with the plug-in loaded: fairseq's
``batch_by_size`` drops a last batch that is not a multiple of ``--required-batch-size-multiple``
(default 8), which compat gives back while fairseq-generate runs (and only then)."""

import re

import numpy as np
import pytest
from fairseq.data import data_utils

from fairseq_shared import compat
from fairseq_shared.data.toydata import SIZES
from helpers_checkpoint import build_for_data, save_checkpoint
from helpers_data import USER_DIR, run_tool, shared_toy_corpus


def test_stock_batching_drops_the_last_partial_batch_and_the_fix_keeps_it():
    indices = np.arange(23, dtype=np.int64)
    lengths = np.full(23, 10, dtype=np.int64)
    for kw in ({"max_sentences": 64}, {"max_sentences": 16}, {"max_tokens": 60}):
        stock = data_utils.batch_by_size(indices, None, lengths, required_batch_size_multiple=8,
                                         **kw)
        kept = compat.batch_by_size_keeping_last_partial_batch(data_utils.batch_by_size)(
            indices, None, lengths, required_batch_size_multiple=8, **kw)
        assert sum(map(len, stock)) < 23, kw  # the silent loss being fixed
        # the same batches as fairseq's, plus the one it dropped; every index once, in order
        assert [b.tolist() for b in kept[:len(stock)]] == [b.tolist() for b in stock]
        assert np.concatenate(kept).tolist() == list(range(23)), kw
    assert [len(b) for b in data_utils.batch_by_size(
        indices, None, lengths, max_sentences=64, required_batch_size_multiple=8)] == [16]
    # nothing dropped (a multiple of 1): the same batches as fairseq's
    exact = data_utils.batch_by_size(indices, None, lengths, max_sentences=8,
                                     required_batch_size_multiple=1)
    kept = compat.batch_by_size_keeping_last_partial_batch(data_utils.batch_by_size)(
        indices, None, lengths, max_sentences=8, required_batch_size_multiple=1)
    assert [len(b) for b in exact] == [8, 8, 7]
    assert [b.tolist() for b in kept] == [b.tolist() for b in exact]


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory):
    toy = shared_toy_corpus(tmp_path_factory)
    args, _, model = build_for_data(f"{toy}/bin", "transformer_cycle_rev", [
        "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-unique-layers", "1",
        "--decoder-unique-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16",
        "--decoder-ffn-embed-dim", "16", "--share-all-embeddings"])
    return toy, save_checkpoint(tmp_path_factory.mktemp("gen") / "untrained.pt", args, model)


@pytest.mark.parametrize("batching", [["--batch-size", "64"], ["--max-tokens", "100"]])
def test_fairseq_generate_translates_all_23_test_sentences(toy_checkpoint, batching):
    toy, ckpt = toy_checkpoint
    assert SIZES["test"] == 23
    # no --required-batch-size-multiple: fairseq's default 8 (16 of 23 before the fix)
    _, out = run_tool("fairseq-generate", f"{toy}/bin", "--user-dir", USER_DIR, "--path", ckpt,
                      "--gen-subset", "test", "--beam", "2", "--max-len-b", "5", "--cpu",
                      *batching)
    ids = sorted(int(m) for m in re.findall(r"^H-(\d+)\t", out, flags=re.M))
    assert ids == list(range(23))
    assert "Translated 23 sentences" in out
    # the fix lives only inside fairseq-generate's run: training batches stay fairseq's
    assert not getattr(data_utils.batch_by_size, "keeps_last_partial_batch", False)
