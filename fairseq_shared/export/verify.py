"""The export check: do two implementations compute the same model? (and how do their
searches differ?)

Each engine (fairseq, CTranslate2, Hugging Face) translates the verification sentences with
fairseq's beam settings, giving ``{sentence id: (target ids with the final EOS, score)}``.
For every sentence, the reference's hypothesis *and* the candidate's are scored by both
implementations with teacher forcing (per-token log-probabilities). The two implementations
compute the same model when these agree to the target's stated tolerance on every sentence;
only a score difference fails the export.

Beam searches may still pick different hypotheses (CTranslate2, for one, masks pad and the
minimum length before its softmax where fairseq masks after, which on a weak model changes a
few searches): such sentences are reported, with which side found the hypothesis that the
reference model scores higher, and never fail the check.
"""

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

Hypotheses = Dict[int, Tuple[List[int], float]]
#: scores ``[(sentence id, target ids with EOS)]`` -> per-token log-probs of each
Scorer = Callable[[Sequence[Tuple[int, List[int]]]], List[torch.Tensor]]

#: Per-token |log p| tolerance of each target against fairseq; None: reported, not required.
TOLERANCES = {
    "fairseq_plain": 1e-6,  # the same kernels on the same (expanded) weights
    "ct2_float32": 1e-4,  # two float32 implementations round differently
    "hf": 1e-4,
    "ct2_int8": None, "ct2_int8_float32": None, "ct2_float16": None,  # quantized weights
}
EXAMPLES = 5  # failures and search differences listed in the report


def max_len(model, src_len: int, max_len_a: float, max_len_b: int) -> int:
    """fairseq's ``SequenceGenerator`` limit: tokens before the final EOS."""
    limit = model.max_decoder_positions() - 1
    return min(int(max_len_a * src_len + max_len_b), limit)


def groups(dataset, ids: Sequence[int], batch_size: int, same_length: bool) -> List[List[int]]:
    """``ids`` in batches of at most ``batch_size`` consecutive ids; with ``same_length``, of
    one source length each: fairseq's length limit (``max_len_a`` > 0) reads the padded
    length of a batch, so only such a batch gives every sentence its own limit (ids sorted by
    length make such batches full)."""
    out: List[List[int]] = []
    for i in (int(i) for i in ids):
        last = out[-1] if out else None
        if (last is None or len(last) == batch_size
                or same_length and dataset.src_sizes[i] != dataset.src_sizes[last[0]]):
            out.append([])
        out[-1].append(i)
    return out


def _batches(dataset, ids: Sequence[int], batch_size: int, same_length: bool = False):
    for group in groups(dataset, ids, batch_size, same_length):
        yield dataset.collater([dataset[i] for i in group])


def fairseq_hypotheses(model, task, dataset, ids, beam=4, lenpen=1.0, max_len_a=0.0,
                       max_len_b=200, batch_size=16) -> Hypotheses:
    """fairseq's beam search of ``model`` (a list of models: their ensemble, as
    ``fairseq-generate --path a.pt:b.pt``)."""
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator(
        model if isinstance(model, list) else [model], task.target_dictionary,
        beam_size=beam, len_penalty=lenpen, max_len_a=max_len_a, max_len_b=max_len_b,
    )
    out: Hypotheses = {}
    with torch.no_grad():  # fairseq's limit uses the padded batch length: one length a batch
        for sample in _batches(dataset, ids, batch_size, same_length=bool(max_len_a)):
            hypos = generator.forward(sample)
            for k, sid in enumerate(sample["id"].tolist()):
                best = hypos[k][0]
                out[sid] = (best["tokens"].tolist(), float(best["score"]))
    return out


def per_sentence_hypotheses(translate, model, dataset, ids, beam=4, lenpen=1.0, max_len_a=0.0,
                            max_len_b=200, batch_size=16) -> Hypotheses:
    """Another engine's hypotheses with fairseq's settings: ``translate(sources, beam, lenpen,
    limit)`` -> ``[(ids with EOS, score)]``; sentences of one source length per call when the
    length limit depends on the source (``max_len_a`` > 0), since engines' limits are per
    batch."""
    out: Hypotheses = {}
    for chunk in groups(dataset, ids, batch_size, same_length=bool(max_len_a)):
        sources = [dataset[i]["source"] for i in chunk]
        limit = max_len(model, len(sources[0]), max_len_a, max_len_b)
        for sid, hyp in zip(chunk, translate(sources, beam, lenpen, limit)):
            out[sid] = hyp
    return out


def ct2_hypotheses(decoder, model, dataset, ids, **settings) -> Hypotheses:
    return per_sentence_hypotheses(decoder.translate, model, dataset, ids, **settings)


def fairseq_scorer(model, dataset) -> Scorer:
    """Teacher-forced per-token log-probs of fairseq ``model`` (one sentence at a time)."""
    eos = model.decoder.dictionary.eos()

    def score(pairs):
        out = []
        with torch.no_grad():
            for sid, target in pairs:
                source = dataset[int(sid)]["source"]
                tgt = torch.tensor(target)
                prev = torch.cat([torch.tensor([eos]), tgt[:-1]])[None]
                logits, _ = model(source[None], torch.tensor([len(source)]), prev)
                lprobs = model.get_normalized_probs((logits, None), log_probs=True)[0]
                out.append(lprobs.float().gather(1, tgt[:, None])[:, 0])
        return out

    return score


def sentence_score(token_scores: torch.Tensor, lenpen: float) -> float:
    """fairseq's beam score of a finished hypothesis: sum over (length incl. EOS)^lenpen."""
    return token_scores.sum().item() / (len(token_scores) ** lenpen)


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return math.inf
    return (a - b).abs().max().item() if a.numel() else 0.0


def check(reference: Hypotheses, candidate: Hypotheses, score_reference: Scorer,
          score_candidate: Scorer, tolerance: Optional[float], lenpen: float = 1.0,
          describe: Callable[[int], str] = str) -> Dict:
    """Model agreement (both hypotheses of every sentence, scored by both implementations)
    and the search differences; ``tolerance`` None: reported only (``required`` False).
    ``describe(sentence id)`` names a sentence in the report (its source text)."""
    if set(reference) != set(candidate):
        raise ValueError("the two decoders translated different sentences")
    ids = sorted(reference)
    pairs = [(sid, hyp) for sid in ids
             for hyp in [reference[sid][0]] + ([candidate[sid][0]]
                                                if candidate[sid][0] != reference[sid][0] else [])]
    ref_scores, cand_scores = score_reference(pairs), score_candidate(pairs)
    diffs: Dict[int, float] = {}
    fairseq_score: Dict[Tuple[int, Tuple[int, ...]], float] = {}
    for (sid, hyp), r, c in zip(pairs, ref_scores, cand_scores):
        diffs[sid] = max(diffs.get(sid, 0.0), _diff(r, c))
        fairseq_score[sid, tuple(hyp)] = sentence_score(r, lenpen)
    bad = [sid for sid in ids if tolerance is not None and not diffs[sid] <= tolerance]
    search = {"identical": 0, "reference_higher": 0, "candidate_higher": 0, "tied": 0}
    examples = []
    tie = tolerance if tolerance is not None else 0.0
    for sid in ids:
        ref, cand = reference[sid][0], candidate[sid][0]
        if ref == cand:
            search["identical"] += 1
            continue
        a, b = fairseq_score[sid, tuple(ref)], fairseq_score[sid, tuple(cand)]
        side = "tied" if abs(a - b) <= tie else "reference_higher" if a > b else "candidate_higher"
        search[side] += 1
        if len(examples) < EXAMPLES:
            examples.append({"id": sid, "source": describe(sid), "reference": ref,
                             "candidate": cand, "reference_model_scores": [a, b]})
    different = len(ids) - search["identical"]
    return {
        "sentences": len(ids),
        "tolerance": tolerance,
        "required": tolerance is not None,
        "max_abs_diff": max(diffs.values(), default=0.0),
        "model_agrees": len(ids) - len(bad),
        "model_differs": [{"id": sid, "source": describe(sid), "max_abs_diff": diffs[sid]}
                          for sid in bad[:EXAMPLES]],
        "search": {**search, "different": different, "examples": examples},
        # the earlier report's names: identical / exact ties / real (model) differences
        "identical": search["identical"], "ties": search["tied"], "different": len(bad),
        "ok": not bad,
    }


def summary_line(key: str, value: Dict) -> str:
    n, tol = value["sentences"], value["tolerance"]
    s = value["search"]
    stated = "report only" if tol is None else f"tolerance {tol:g}"
    if tol is None:
        model = f"max |diff| {value['max_abs_diff']:.2g} per token ({stated})"
    elif value["ok"]:
        model = (f"model agrees on {value['model_agrees']}/{n} sentences (max |diff| "
                 f"{value['max_abs_diff']:.2g} per token, {stated})")
    else:
        first = value["model_differs"][0]
        model = (f"model DIFFERS on {n - value['model_agrees']}/{n} sentences (max |diff| "
                 f"{value['max_abs_diff']:.2g} per token > {tol:g}), first: sentence "
                 f"{first['id']} \"{first['source']}\"")
    search = (f"search: {s['identical']}/{n} identical, {s['different']} different "
              f"({s['candidate_higher']} where the candidate's hypothesis scores higher, "
              f"{s['reference_higher']} where fairseq's does, {s['tied']} tied)")
    return f"verify {key}: {model}; {search}"
