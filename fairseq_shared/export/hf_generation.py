"""Generation with a Hugging Face export as fairseq's beam search generates.

``generation_config.json`` holds what it can (checked facts: ``shared/reference/hf-export.md``):
the decoder starts from EOS, ``num_beams``, ``length_penalty`` (fairseq's ``--lenpen``: both
divide the sum of log-probs, EOS included, by the length with EOS to that power),
``early_stopping=True`` (fairseq's stopping rule; at beam 1, greedy search, there are no beams to
stop and transformers refuses the flag), ``min_length = min_len + 1`` (HF counts the
start token), pad suppressed, ``max_length = max_len_b + 2`` (fairseq's limit with
``--max-len-a 0``; HF has no source-relative limit).

What it cannot hold: at the length limit fairseq keeps EOS's own log-prob, while HF's forced
end gives it log-prob 0, so hypotheses that reach the limit score (and rank) differently.
:class:`FairseqLengthLimit`, passed as ``generate(..., logits_processor=[...])``, leaves only
EOS at the last step, with the model's log-prob: exact.
"""

from typing import Dict, List, Sequence, Tuple

import torch
from transformers import GenerationConfig, LogitsProcessor


class FairseqLengthLimit(LogitsProcessor):
    """At the last step before ``max_length``, every token but EOS gets -inf; EOS keeps the
    model's log-prob (fairseq's ``SequenceGenerator`` at ``max_len``)."""

    def __init__(self, max_length: int, eos_token_id: int):
        self.max_length, self.eos = int(max_length), int(eos_token_id)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor):
        if input_ids.shape[-1] >= self.max_length - 1:
            eos = scores[:, self.eos].clone()
            scores = torch.full_like(scores, float("-inf"))
            scores[:, self.eos] = eos
        return scores


def generation_config(tgt_dict, beam: int = 4, lenpen: float = 1.0, max_len_b: int = 200,
                      min_len: int = 1) -> GenerationConfig:
    return GenerationConfig(
        num_beams=beam, length_penalty=lenpen, early_stopping=beam > 1, do_sample=False,
        min_length=min_len + 1, max_length=max_len_b + 2, suppress_tokens=[tgt_dict.pad()],
        decoder_start_token_id=tgt_dict.eos(), bos_token_id=tgt_dict.bos(),
        eos_token_id=tgt_dict.eos(), pad_token_id=tgt_dict.pad(), forced_eos_token_id=None,
    )


def generate(model, input_ids, attention_mask, max_length: int, **overrides):
    """``model.generate`` with the export's settings, limit ``max_length`` (start token and
    EOS included) and :class:`FairseqLengthLimit`."""
    eos = model.generation_config.eos_token_id
    with torch.no_grad():
        return model.generate(
            input_ids=input_ids, attention_mask=attention_mask, max_length=max_length,
            logits_processor=[FairseqLengthLimit(max_length, eos)],
            return_dict_in_generate=True, output_scores=True, **overrides)


class HFEngine:
    """An exported model fed with fairseq token ids, for the export check."""

    def __init__(self, model_dir: str, pad: int, eos: int):
        import transformers

        from fairseq_shared.export import hf_shared_model  # registers the shared form

        hf_shared_model.check_recorded_hashes(model_dir)  # either form, inside an export
        self.model = transformers.AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
        self.pad, self.eos = pad, eos

    def _inputs(self, sources: Sequence[torch.Tensor]):
        rows = [[int(t) for t in s if int(t) != self.pad] for s in sources]
        width = max(map(len, rows))
        ids = torch.tensor([r + [self.pad] * (width - len(r)) for r in rows])
        return ids, ids.ne(self.pad).long()

    def translate(self, sources, beam: int, lenpen: float, limit: int, min_len: int = 1
                  ) -> List[Tuple[List[int], float]]:
        """fairseq's hypotheses: ``limit`` tokens at most before the EOS, ``min_len`` at
        least (HF counts the start token)."""
        ids, mask = self._inputs(sources)
        out = generate(self.model, ids, mask, max_length=limit + 2, num_beams=beam,
                       length_penalty=lenpen, min_length=min_len + 1)
        hyps = []
        for row in out.sequences.tolist():
            tokens = row[1:]
            while tokens and tokens[-1] == self.pad:
                tokens.pop()
            hyps.append(tokens)
        if beam > 1:
            scores = out.sequences_scores.tolist()
        else:  # greedy search returns no sequence scores: fairseq's, from the model's log-probs
            scores = [float(lprobs.sum()) / len(tokens) ** lenpen
                      for lprobs, tokens in zip(self.score(sources, hyps), hyps)]
        return [(tokens, float(score)) for tokens, score in zip(hyps, scores)]

    def score(self, sources, targets: Sequence[Sequence[int]]) -> List[torch.Tensor]:
        """Teacher-forced per-token log-probs (FSMT builds its causal mask only without the
        cache, hence ``use_cache=False``)."""
        out = []
        with torch.no_grad():
            for source, target in zip(sources, targets):
                ids, mask = self._inputs([source])
                tgt = torch.tensor([list(target)])
                prev = torch.cat([torch.tensor([[self.eos]]), tgt[:, :-1]], dim=1)
                logits = self.model(input_ids=ids, attention_mask=mask, decoder_input_ids=prev,
                                    use_cache=False).logits
                lprobs = torch.log_softmax(logits.float(), dim=-1)[0]
                out.append(lprobs.gather(1, tgt[0][:, None])[:, 0])
        return out
