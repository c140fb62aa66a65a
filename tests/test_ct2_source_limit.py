"""CTranslate2 truncates a source over ``max_input_length`` pieces without a word; the export's
decoder refuses what fairseq refuses instead (``--max-source-positions``, EOS included)."""

import pytest
import torch
from fairseq.data import Dictionary

from fairseq_shared.export.ct2 import CT2Decoder


def decoder(limit):
    d = Dictionary()
    for w in ("a", "b", "c"):
        d.add_symbol(w)
    dec = object.__new__(CT2Decoder)  # no CTranslate2 model needed for the source check
    dec.src_dict, dec.max_source_positions = d, limit
    return dec, d


def test_a_source_within_the_limit_is_passed_without_padding_or_eos():
    dec, d = decoder(limit=4)
    ids = torch.tensor([d.index("a"), d.index("b"), d.index("c"), d.eos(), d.pad()])
    assert dec.source_tokens(ids) == ["a", "b", "c"]  # 3 tokens + EOS = 4: allowed


def test_a_source_over_the_limit_is_refused_naming_both_lengths():
    dec, d = decoder(limit=3)
    ids = torch.tensor([d.index("a"), d.index("b"), d.index("c"), d.eos()])
    with pytest.raises(ValueError, match=r"source of 4 tokens .* --max-source-positions 3"):
        dec.source_tokens(ids)


def test_no_limit_means_no_refusal():
    dec, d = decoder(limit=None)
    assert len(dec.source_tokens(torch.tensor([d.index("a")] * 2000 + [d.eos()]))) == 2000
