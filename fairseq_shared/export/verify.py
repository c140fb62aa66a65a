"""The export check: do two implementations compute the same model? (and how do their
searches differ?) :func:`verify` runs the one of the checkpoint's kind (:mod:`.kinds`, from ``Loaded.kind``,
decided where the checkpoint was opened): :func:`verify_translation` or :func:`verify_lm`.

**Translation models.**

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

**Language models** (:func:`verify_lm`): per-token log-probabilities of evenly spaced samples
of a split, with teacher forcing: fairseq's ``SequenceScorer`` on the plain model must give
exactly the shared model's; CTranslate2's ``Generator.score_batch`` must agree with fairseq to
the ``ct2_float32`` tolerance (two implementations round differently), quantized models are
reported only. Which of the two checks runs is the kind's (:mod:`.kinds`).
"""

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from fairseq_shared.export.ct2 import QUANTIZATIONS

Hypotheses = Dict[int, Tuple[List[int], float]]
LMScores = Dict[int, torch.Tensor]  # sample id -> log-probability of each target token
#: scores ``[(sentence id, target ids with EOS)]`` -> per-token log-probs of each
Scorer = Callable[[Sequence[Tuple[int, List[int]]]], List[torch.Tensor]]

#: Per-token |log p| tolerance of each target against fairseq; None: reported, not required.
TOLERANCES = {
    "fairseq_plain": 1e-6,  # the same kernels on the same (expanded) weights
    "ct2_float32": 1e-4,  # two float32 implementations round differently
    "hf": 1e-4,
    **{f"ct2_{q}": None for q in QUANTIZATIONS},  # quantized weights: reported only
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


def verify_translation(shared_model, plain_model, task, dataset, ids, settings: Dict,
                       ct2_dirs: Dict[str, str], threads: int = 1,
                       hf_dir: Optional[str] = None) -> Dict:
    """The check of every target: the plain checkpoint against the shared model, each
    CTranslate2 model and the Hugging Face one against the plain one (a SAN model,
    ``plain_model`` None: the Hugging Face one against the shared model)."""
    from fairseq_shared.export import ct2 as ct2_lib

    lenpen = settings["lenpen"]

    def describe(sid: int) -> str:
        return task.source_dictionary.string(dataset[int(sid)]["source"])

    shared = fairseq_hypotheses(shared_model, task, dataset, ids, **settings)
    report = {}
    if plain_model is None:
        plain_model, plain = shared_model, shared
    else:
        plain = fairseq_hypotheses(plain_model, task, dataset, ids, **settings)
    score_plain = fairseq_scorer(plain_model, dataset)
    if plain_model is not shared_model:
        report["fairseq_plain_vs_shared"] = check(
            shared, plain, fairseq_scorer(shared_model, dataset), score_plain,
            TOLERANCES["fairseq_plain"], lenpen, describe)
    for name, model_dir in ct2_dirs.items():
        decoder = ct2_lib.CT2Decoder(model_dir, task.source_dictionary, task.target_dictionary,
                                     threads=threads,
                                     max_source_positions=ct2_lib.source_limit(plain_model))
        hyps = ct2_hypotheses(decoder, plain_model, dataset, ids, **settings)

        def score_ct2(pairs, decoder=decoder):
            return decoder.score([dataset[int(sid)]["source"] for sid, _ in pairs],
                                 [target for _, target in pairs])

        report[f"ct2_{name}_vs_fairseq"] = check(
            plain, hyps, score_plain, score_ct2, TOLERANCES[f"ct2_{name}"], lenpen, describe)
    if hf_dir:
        from fairseq_shared.export.hf_generation import HFEngine

        engine = HFEngine(hf_dir, task.target_dictionary.pad(), task.target_dictionary.eos())
        hyps = per_sentence_hypotheses(engine.translate, plain_model, dataset, ids, **settings)

        def score_hf(pairs):
            return engine.score([dataset[int(sid)]["source"] for sid, _ in pairs],
                                [target for _, target in pairs])

        report["hf_vs_fairseq"] = check(plain, hyps, score_plain, score_hf, TOLERANCES["hf"],
                                        lenpen, describe)
    return report


# ---- language models -----------------------------------------------------------------
def lm_fairseq_scores(model, task, dataset, ids: Sequence[int], batch_size: int = 16
                      ) -> LMScores:
    from fairseq.sequence_scorer import SequenceScorer

    scorer = SequenceScorer(task.target_dictionary)
    out: LMScores = {}
    with torch.no_grad():
        for start in range(0, len(ids), batch_size):
            batch = [dataset[int(i)] for i in ids[start:start + batch_size]]
            sample = dataset.collater(batch)
            for sid, hypos in zip(sample["id"].tolist(), scorer.generate([model], sample)):
                out[sid] = hypos[0]["positional_scores"].float()
    return out


def lm_ct2_input(item, dictionary) -> List[str]:
    """One language-modeling sample as CTranslate2 scores it: the first token is the context
    only (fairseq's first source token), every later token is scored (fairseq's targets)."""
    source, target = item["source"].tolist(), item["target"].tolist()
    if source[1:] != target[:-1]:
        raise ValueError("the sample's target is not its source shifted by one token")
    return [dictionary[t] for t in source + target[-1:]]


def lm_ct2_scores(model_dir: str, dictionary, dataset, ids: Sequence[int], threads: int = 1,
                  compute_type: str = "default") -> LMScores:
    import ctranslate2

    generator = ctranslate2.Generator(model_dir, device="cpu", inter_threads=1,
                                      intra_threads=threads, compute_type=compute_type)
    inputs = [lm_ct2_input(dataset[int(i)], dictionary) for i in ids]
    results = generator.score_batch(inputs, max_input_length=0)
    return {int(i): torch.tensor(r.log_probs) for i, r in zip(ids, results)}


def compare_scores(reference: LMScores, candidate: LMScores, tolerance: float = 0.0) -> Dict:
    """Samples whose per-token log-probabilities agree to ``tolerance`` (0: bit-identical)."""
    if set(reference) != set(candidate):
        raise ValueError("the two models scored different samples")
    diffs = {sid: _diff(ref, candidate[sid]) for sid, ref in reference.items()}
    agree = sum(d <= tolerance for d in diffs.values())
    return {
        "sentences": len(reference),
        "tokens": sum(r.numel() for r in reference.values()),
        "identical": agree,
        "different": len(reference) - agree,
        "max_abs_diff": max(diffs.values(), default=0.0),
        "tolerance": tolerance,
        "ok": agree == len(reference),
    }


def verify_lm(shared_model, plain_model, task, dataset, ids, ct2_dirs: Dict[str, str],
              threads: int = 1) -> Dict:
    """A language model's log-prob checks (the module doc)."""
    shared = lm_fairseq_scores(shared_model, task, dataset, ids)
    plain = lm_fairseq_scores(plain_model, task, dataset, ids)
    report = {"fairseq_plain_vs_shared": compare_scores(shared, plain)}
    for name, model_dir in ct2_dirs.items():
        scores = lm_ct2_scores(model_dir, task.source_dictionary, dataset, ids, threads)
        result = compare_scores(plain, scores, TOLERANCES["ct2_float32"])
        if name != "float32":
            result["required"] = False  # quantized weights change the log-probs
        report[f"ct2_{name}_vs_fairseq"] = result
    return report


def lm_summary_line(key: str, value: Dict) -> str:
    return (
        f"verify {key}: {value['identical']}/{value['sentences']} samples with the same "
        f"log-probs ({value['tokens']} tokens, max |diff| {value['max_abs_diff']:.2e}, "
        f"tolerance {value['tolerance']:g}), {value['different']} different"
        + ("" if value.get("required", True) else " (not required: quantized)")
    )


# ---- either kind ---------------------------------------------------------------------
def verify(loaded, kind, plain_model, subset: str, sentences: int, settings: Dict,
           ct2_dirs: Dict[str, str], threads: int = 1, hf_dir: Optional[str] = None) -> Dict:
    """The check of ``kind`` (:class:`~fairseq_shared.export.kinds.ExportKind`, ``loaded``'s)
    on ``sentences`` evenly spaced sentences of ``subset`` (``settings``: fairseq's beam
    settings, a translation model's only): the report's ``verify`` section."""
    from fairseq_shared.subsets import select_ids

    task = loaded.task
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    ids = select_ids(len(dataset), sentences).tolist()
    return {"subset": subset, **kind.verify(loaded, plain_model, dataset, ids, settings,
                                            ct2_dirs, threads, hf_dir)}
