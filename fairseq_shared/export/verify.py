"""Hypotheses of two decoders on the same sentences, compared (only exact score ties may
differ).

Hypotheses are ``{sentence id: (target ids with the final EOS, score)}``. Where two decoders
disagree on a sentence, both hypotheses are scored by the same fairseq model with teacher
forcing (sum of log-probabilities over the length to the power ``lenpen``, as fairseq's beam
search scores them); the difference is a tie when the two scores agree to ``TIE_TOLERANCE``
(float32 rounding between two implementations), and a failure otherwise.
"""

from typing import Dict, List, Sequence, Tuple

import torch

TIE_TOLERANCE = 1e-5
Hypotheses = Dict[int, Tuple[List[int], float]]


def max_len(model, src_len: int, max_len_a: float, max_len_b: int) -> int:
    """fairseq's ``SequenceGenerator`` limit: tokens before the final EOS."""
    limit = model.max_decoder_positions() - 1
    return min(int(max_len_a * src_len + max_len_b), limit)


def _batches(dataset, ids: Sequence[int], batch_size: int):
    for start in range(0, len(ids), batch_size):
        yield dataset.collater([dataset[int(i)] for i in ids[start:start + batch_size]])


def fairseq_hypotheses(model, task, dataset, ids, beam=4, lenpen=1.0, max_len_a=0.0,
                       max_len_b=200, batch_size=16) -> Hypotheses:
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator(
        [model], task.target_dictionary, beam_size=beam, len_penalty=lenpen,
        max_len_a=max_len_a, max_len_b=max_len_b,
    )
    out: Hypotheses = {}
    with torch.no_grad():  # fairseq's limit uses the padded batch length: 1 per batch then
        for sample in _batches(dataset, ids, 1 if max_len_a else batch_size):
            hypos = generator.forward(sample)
            for k, sid in enumerate(sample["id"].tolist()):
                best = hypos[k][0]
                out[sid] = (best["tokens"].tolist(), float(best["score"]))
    return out


def ct2_hypotheses(decoder, model, dataset, ids, beam=4, lenpen=1.0, max_len_a=0.0,
                   max_len_b=200, batch_size=16) -> Hypotheses:
    """CTranslate2 with fairseq's settings; one sentence per call when the length limit
    depends on the source (``max_len_a`` > 0), since CTranslate2's limit is per batch."""
    size = 1 if max_len_a else batch_size
    out: Hypotheses = {}
    for start in range(0, len(ids), size):
        chunk = [int(i) for i in ids[start:start + size]]
        sources = [dataset[i]["source"] for i in chunk]
        limit = max_len(model, len(sources[0]), max_len_a, max_len_b)
        for sid, hyp in zip(chunk, decoder.translate(sources, beam, lenpen, limit)):
            out[sid] = hyp
    return out


def forced_score(model, source: torch.Tensor, target: List[int], lenpen: float) -> float:
    """fairseq's score of ``target`` (ids with the final EOS) for ``source``."""
    eos = model.decoder.dictionary.eos()
    tgt = torch.tensor(target)
    prev = torch.cat([torch.tensor([eos]), tgt[:-1]])[None]
    with torch.no_grad():
        logits, _ = model(source[None], torch.tensor([len(source)]), prev)
        lprobs = model.get_normalized_probs((logits, None), log_probs=True)[0]
    total = lprobs.float().gather(1, tgt[:, None]).sum().item()
    return total / (len(target) ** lenpen)


def compare(reference: Hypotheses, candidate: Hypotheses, model, dataset,
            lenpen: float = 1.0) -> Dict:
    """Identical hypotheses, exact score ties and real differences of ``candidate``."""
    if set(reference) != set(candidate):
        raise ValueError("the two decoders translated different sentences")
    ties, differ = [], []
    for sid in sorted(reference):
        ref, cand = reference[sid][0], candidate[sid][0]
        if ref == cand:
            continue
        source = dataset[sid]["source"]
        a = forced_score(model, source, ref, lenpen)
        b = forced_score(model, source, cand, lenpen)
        entry = {"id": sid, "reference": ref, "candidate": cand, "scores": [a, b]}
        (ties if abs(a - b) <= TIE_TOLERANCE else differ).append(entry)
    return {
        "sentences": len(reference),
        "identical": len(reference) - len(ties) - len(differ),
        "ties": len(ties),
        "different": len(differ),
        "examples": (differ + ties)[:3],
        "ok": not differ,
    }
