"""Engines outside fairseq (CTranslate2, a Hugging Face export) timed like
:class:`~fairseq_shared.timing.passes.LoadedModel`: the session's sentences in the session's
batches, fairseq's length limit, both clocks. One pass loop (:class:`TranslatorEngine`) takes
the engine's ``translate(sources, beam, lenpen, limit, min_len)``."""

import time
from typing import Callable, Dict, List, Optional

from fairseq_shared.timing.passes import PeakRSS, check_counts
from fairseq_shared.timing.results import PassResult


class TranslatorEngine:
    """``run_pass()`` decodes the session's batches with ``translate(sources, beam, lenpen,
    limit, min_len) -> [(target ids with EOS, score)]`` and returns ``(PassResult, {id: target
    ids with EOS})`` (no decode trace: the engine's search is not fairseq's to count); ``name``
    names it in a sentence-count error; ``torch_threads``: the engine computes with torch, whose
    thread count the pass records (CTranslate2 has its own threads)."""

    def __init__(self, session, translate: Callable, name: str, torch_threads: bool = False):
        self.session, self.translate, self.name = session, translate, name
        self.torch_threads = torch_threads
        self.max_positions = min(  # fairseq's limit; the task's when no model is loaded
            [m.max_decoder_positions() for m in session.models]
            or [session.task.cfg.max_target_positions])

    def run_pass(self, max_batches: Optional[int] = None, check: bool = True,
                 longest: bool = False):
        """One pass (``max_batches``/``longest``: as :meth:`LoadedModel.run_pass`'s)."""
        s, gen = self.session, self.session.cfg.generation
        outputs: Dict[int, List[int]] = {}
        gen_seconds = cpu_seconds = 0.0
        tokens = 0
        wall0 = time.perf_counter()
        with PeakRSS() as mem:
            for sample in s.batches(max_batches, longest=longest):
                src = sample["net_input"]["src_tokens"]
                limit = min(int(gen.max_len_a * src.size(1) + gen.max_len_b),
                            self.max_positions - 1)  # fairseq's SequenceGenerator limit
                c0, t0 = time.process_time(), time.perf_counter()
                hyps = self.translate(list(src), gen.beam, gen.lenpen, limit, gen.min_len)
                gen_seconds += time.perf_counter() - t0
                cpu_seconds += time.process_time() - c0
                for sid, (ids, _) in zip(sample["id"].tolist(), hyps):
                    outputs[sid] = ids
                    tokens += len(ids)
        if check:
            check_counts(s.ids, outputs, name=self.name)
        wall = time.perf_counter() - wall0
        threads = None
        if self.torch_threads:
            import torch

            threads = torch.get_num_threads()
        return PassResult(gen_seconds, wall, len(outputs), tokens, mem.peak / 2**20,
                          (mem.peak - mem.start) / 2**20, cpu_seconds, threads=threads), outputs


def CT2Engine(session, model_dir: str, compute_type: str, threads: int) -> TranslatorEngine:
    """A CTranslate2 model's engine."""
    from fairseq_shared.export.ct2 import CT2Decoder

    decoder = CT2Decoder(model_dir, session.src_dict, session.tgt_dict, threads, compute_type)
    return TranslatorEngine(session, decoder.translate, model_dir)


def HFEngine(session, model_dir: str) -> TranslatorEngine:
    """A Hugging Face export's engine: ``generate()`` with fairseq's settings (threads: the
    caller's ``torch.set_num_threads``)."""
    from fairseq_shared.export.hf_generation import HFEngine as Decoder

    decoder = Decoder(model_dir, session.tgt_dict.pad(), session.tgt_dict.eos())
    return TranslatorEngine(session, decoder.translate, model_dir, torch_threads=True)


def detokenize(session, outputs: Dict[int, List[int]]) -> List[str]:
    """Target ids of the session's sentences (id order) as fairseq-generate post-processes
    them (``--post-process``, then ``--bpe``/``--tokenizer`` decoding)."""
    import torch
    from fairseq import utils

    hyps = []
    for sid in session.ids.tolist():
        _, text, _ = utils.post_process_prediction(
            hypo_tokens=torch.tensor(outputs[sid], dtype=torch.int), src_str="", alignment=None,
            align_dict=None, tgt_dict=session.tgt_dict,
            remove_bpe=session.cfg.common_eval.post_process,
            extra_symbols_to_ignore={session.tgt_dict.eos()},
        )
        hyps.append(session.decode_fn(text))
    return hyps
