"""CTranslate2: conversion through its own fairseq converter, decoding, and size.

CTranslate2's converter (``ctranslate2.converters.FairseqConverter``) accepts fairseq's
``transformer`` and ``transformer_lm`` models (not this package's) and reads the configuration
as attributes of ``checkpoint["args"]`` (fairseq's legacy layout). It is handed the plain
checkpoint in that layout (the kind's :meth:`~fairseq_shared.export.kinds.ExportKind.
legacy_checkpoint`), written to a temporary file; the ``argparse.Namespace`` in it loads under
``weights_only`` because ``fairseq_shared.compat`` allows exactly that type. The plain
``checkpoint.pt`` itself holds no ``Namespace`` (stock fairseq loads it weights-only, without
the plug-in), so CTranslate2's ``ct2-fairseq-converter`` cannot read it: the export converts
to every type CTranslate2's converter writes instead (:data:`QUANTIZATIONS`).
CTranslate2 aliases equal tensors when it saves, so ``model.bin`` stores each tied weight once.
"""

import io
import os
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import torch

#: ``--quantization``: every weight type CTranslate2's converter writes but float32 (always
#: written, to ``ct2/``); ``ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES``
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
                 "bfloat16")


def convert(legacy_checkpoint: dict, dict_dir: str, out_dir: str,
            quantization: Optional[str] = None) -> str:
    """Convert the plain checkpoint in the legacy layout (dict,
    :meth:`~fairseq_shared.export.kinds.ExportKind.legacy_checkpoint`) to a CTranslate2 model
    in ``out_dir``. ``dict_dir`` holds its dictionaries."""
    import fairseq_shared  # noqa: F401  (compat: Namespace allowed under weights_only)
    from ctranslate2.converters.fairseq import FairseqConverter

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"--quantization: unknown value '{quantization}'; allowed: {', '.join(QUANTIZATIONS)}"
        )
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out_dir))) as tmp:
        path = os.path.join(tmp, "legacy_args.pt")
        buffer = io.BytesIO()  # torch's file writer reports a full disk as "unexpected pos"
        torch.save(legacy_checkpoint, buffer)
        with open(path, "wb") as f:
            f.write(buffer.getbuffer())
        FairseqConverter(path, dict_dir).convert(out_dir, quantization=quantization, force=True)
    return out_dir


def position_table_bytes(model) -> int:
    """fp32 bytes of the sinusoidal position tables CTranslate2 stores (not parameters);
    encoder and decoder tables that are equal are stored once, as CTranslate2 aliases them."""
    tables = []
    for name, pos in model.named_modules():  # each stack's, whichever stacks the model has
        weights = getattr(pos, "weights", None) if name.endswith("embed_positions") else None
        if weights is None or isinstance(pos, torch.nn.Embedding):
            continue  # none, or learned: a parameter, counted with the weights
        table = weights[pos.padding_idx + 1:]
        if not any(t.shape == table.shape and torch.equal(t, table) for t in tables):
            tables.append(table)
    return sum(t.numel() * 4 for t in tables)


def size_report(model_dir: str, shared_model) -> Dict:
    """``model.bin`` bytes against the shared model's unique fp32 weights (+ position table)."""
    unique = sum(p.numel() * 4 for p in shared_model.parameters())
    positions = position_table_bytes(shared_model)
    stored = os.path.getsize(os.path.join(model_dir, "model.bin"))
    return {
        "model_bin_bytes": stored,
        "unique_fp32_weight_bytes": unique,
        "position_table_bytes": positions,
        "ratio_to_unique_plus_positions": round(stored / (unique + positions), 4),
    }


class CT2Decoder:
    """A CTranslate2 translator on CPU fed with fairseq token ids.

    CTranslate2 truncates sources over ``max_input_length`` pieces (default 1024) without a
    word, where fairseq refuses sources over ``--max-source-positions`` tokens (EOS
    included): this decoder passes ``max_input_length=0`` (no truncation) and refuses what
    fairseq refuses, naming the sentence's length and the limit."""

    def __init__(self, model_dir: str, src_dict, tgt_dict, threads: int = 1,
                 compute_type: str = "default", max_source_positions: Optional[int] = None):
        import ctranslate2

        self.translator = ctranslate2.Translator(
            model_dir, device="cpu", inter_threads=1, intra_threads=threads,
            compute_type=compute_type,
        )
        self.src_dict, self.tgt_dict = src_dict, tgt_dict
        self.model_dir = model_dir
        self.max_source_positions = max_source_positions

    def source_tokens(self, ids: torch.Tensor) -> List[str]:
        """A fairseq source (padding and final EOS dropped: CTranslate2 adds the EOS)."""
        d = self.src_dict
        tokens = [d[int(t)] for t in ids if int(t) not in (d.pad(), d.eos())]
        limit = self.max_source_positions
        if limit is not None and len(tokens) + 1 > limit:
            raise ValueError(
                f"a source of {len(tokens) + 1} tokens (EOS included) is over the model's "
                f"--max-source-positions {limit}: fairseq refuses it, CTranslate2 would "
                "truncate it")
        return tokens

    def target_tokens(self, ids: Sequence[int]) -> List[str]:
        """Target ids with the final EOS as CTranslate2 scores them (it adds the EOS)."""
        d = self.tgt_dict
        if not ids or int(ids[-1]) != d.eos():
            raise ValueError("a target to score must end with EOS")
        return [d[int(t)] for t in ids[:-1]]

    def score(self, sources: Sequence[torch.Tensor], targets: Sequence[Sequence[int]]
              ) -> List[torch.Tensor]:
        """Teacher-forced per-token log-probs of ``targets`` (EOS included), as fairseq's."""
        results = self.translator.score_batch(
            [self.source_tokens(s) for s in sources], [self.target_tokens(t) for t in targets],
            max_input_length=0)
        return [torch.tensor(r.log_probs) for r in results]

    def translate(self, sources: Sequence[torch.Tensor], beam: int, lenpen: float,
                  max_len: int, min_len: int = 1) -> List[Tuple[List[int], float]]:
        """fairseq's settings: ``max_len`` tokens before the EOS (fairseq's
        ``min(max_len_a * src_len + max_len_b, max positions - 1)``), at least ``min_len``
        tokens, <pad> never produced. Returns target ids with the final EOS, and the score."""
        results = self.translator.translate_batch(
            [self.source_tokens(s) for s in sources],
            beam_size=beam, length_penalty=lenpen, max_decoding_length=max_len,
            min_decoding_length=min_len, return_scores=True, max_input_length=0,
            suppress_sequences=[["<blank>"]],  # fairseq sets the <pad> log-prob to -inf
        )
        out = []
        for r in results:
            ids = [self.tgt_dict.index(t) for t in r.hypotheses[0]] + [self.tgt_dict.eos()]
            out.append((ids, float(r.scores[0])))
        return out


def source_limit(model) -> int:
    """fairseq's longest source (EOS included) of a translation ``model``: its
    ``--max-source-positions`` (any kind's: :meth:`~fairseq_shared.export.kinds.ExportKind.
    source_stack`)."""
    return int(model.encoder.max_positions())
