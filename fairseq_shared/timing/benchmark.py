"""The timing run: warm-up, interleaved timed passes of every model, speed ratios against a
baseline, BLEU and chrF of the same decode."""

import statistics
import time
from typing import Dict, List, Optional, Sequence

from fairseq_shared.scoring import score
from fairseq_shared.timing.results import BenchmarkReport, ModelResult
from fairseq_shared.timing.session import Session, _parse_force


def benchmark(
    checkpoints: Dict[str, str],
    data: str,
    generate_args: Sequence[str] = (),
    *,
    baseline: Optional[str] = None,
    warmup: int = 1,
    warmup_batches: Optional[int] = None,
    repeats: int = 3,
    subset: Optional[int] = None,
    force=None,
    threads: Optional[int] = None,
    references: Optional[str] = None,
    script: bool = False,
    progress=print,
) -> BenchmarkReport:
    """Decode ``data``'s test set (``--gen-subset``) with every checkpoint and time it.

    ``checkpoints``: ordered ``{name: checkpoint path}``. ``generate_args``: any
    fairseq-generate options (``--beam 4 --lenpen 1.0 --batch-size 64 --cpu ...``).
    ``baseline``: the name that speed ratios are relative to (default: the first).
    ``warmup``/``warmup_batches``: untimed passes (and how many of the longest batches
    each; None = all).
    ``repeats``: timed passes per model, interleaved across models. ``subset``: decode only
    this many sentences, evenly spaced by id (None = all). ``force``: None, ``"reference"``
    or an int L, see the module docstring. ``threads``: ``torch.set_num_threads``.
    ``references``: raw reference file (default ``<root>/raw/<subset>.<tgt>``).
    Raises :class:`DroppedSentencesError` if any pass misses a sentence.
    """
    if not checkpoints:
        raise ValueError("no checkpoints given")
    names = list(checkpoints)
    baseline = baseline or names[0]
    if baseline not in checkpoints:
        raise ValueError(f"baseline '{baseline}' is not one of {names}")
    repeats = max(1, int(repeats))
    session = Session(data, checkpoints[names[0]], generate_args, subset=subset,
                      force=force, threads=threads, references=references, script=script)
    loaded = []
    for name in names:
        progress(f"[decode] loading {name}: {checkpoints[name]}")
        loaded.append(session.load(name, checkpoints[name]))
    results = {m.name: ModelResult(m.name, m.path, m.params) for m in loaded}
    first_outputs: Dict[str, Dict[int, List[int]]] = {}
    for w in range(warmup):
        for m in loaded:
            t0 = time.perf_counter()
            # a partial warm-up decodes the longest batches: the largest tensors are then
            # allocated before the first timed pass, which would otherwise pay for them
            m.run_pass(max_batches=warmup_batches, check=warmup_batches is None, longest=True)
            progress(f"[decode] warm-up {w + 1}/{warmup} {m.name}: {time.perf_counter() - t0:.1f}s")
    n = len(loaded)
    t_start = time.perf_counter()
    for r in range(repeats):
        order = loaded[r % n:] + loaded[: r % n]
        for k, m in enumerate(order):
            res, outputs = m.run_pass()
            results[m.name].passes.append(res)
            if m.name not in first_outputs:
                first_outputs[m.name] = outputs
                results[m.name].batch_trace = [b.to_json() for b in res.batches]
            elif outputs != first_outputs[m.name]:
                results[m.name].deterministic = False
            done = r * n + k + 1
            elapsed = time.perf_counter() - t_start
            eta = elapsed / done * (repeats * n - done)
            progress(
                f"[decode] pass {r + 1}/{repeats} {m.name}: {res.sentences} sentences, "
                f"{res.tokens} tokens, {res.gen_seconds:.2f}s, {res.tokens_per_s:.1f} tok/s "
                f"(CPU {res.cpu_seconds:.2f}s, {res.cpu_tokens_per_s:.1f} tok/s, "
                f"{(res.trace or {}).get('steps', '-')} decoder steps, "
                f"{res.cpu_ms_per_step:.2f} CPU ms/step) "
                f"({done}/{repeats * n}, elapsed {elapsed:.0f}s, ETA {eta:.0f}s)"
            )
    # ratios: median over rounds of the per-round ratio against the baseline
    base = results[baseline]
    for res in results.values():
        res.speed_ratios = [p.tokens_per_s / b.tokens_per_s
                            for p, b in zip(res.passes, base.passes)]
        res.cpu_speed_ratios = [p.cpu_tokens_per_s / b.cpu_tokens_per_s
                                for p, b in zip(res.passes, base.passes)]
        res.speed_ratio = statistics.median(res.speed_ratios)
        res.sent_speed_ratio = statistics.median(
            p.sentences_per_s / b.sentences_per_s for p, b in zip(res.passes, base.passes)
        )
        res.cpu_speed_ratio = statistics.median(res.cpu_speed_ratios)
        res.cpu_sent_speed_ratio = statistics.median(
            p.cpu_sentences_per_s / b.cpu_sentences_per_s
            for p, b in zip(res.passes, base.passes)
        )
    refs, ref_source = session.references()
    for m in loaded:
        res = results[m.name]
        outputs = first_outputs[m.name]
        res.hypotheses = m.detokenize(outputs)
        res.hyp_lengths = [len(outputs[i]) for i in session.ids.tolist()]
        s = score(res.hypotheses, refs, digits=None)
        res.bleu, res.chrf = s["bleu"], s["chrf"]
        res.bleu_signature, res.chrf_signature = s["bleu_signature"], s["chrf_signature"]
    settings = session.settings()
    settings.update(
        warmup_passes=warmup,
        warmup_batches=(f"the {warmup_batches} longest" if warmup_batches is not None
                        else "all"),
        timed_passes=repeats,
        interleaved=True,
        references=ref_source,
        timer="task.inference_step only (as fairseq-generate's gen_timer)",
        cpu_timer="time.process_time around the same task.inference_step calls "
                  "(this process, all threads)",
        tokens_counted="top hypothesis tokens incl. EOS (as fairseq-generate)",
        threads_per_pass=sorted({p.threads for r in results.values() for p in r.passes}),
        trace="decoder steps = calls of the first model's decoder.forward per batch "
              "(fairseq_shared.timing.trace)",
    )
    report = BenchmarkReport(settings, [results[n_] for n_ in names], baseline)
    report.references = refs
    return report


def benchmark_forced_lengths(checkpoints: Dict[str, str], data: str,
                             generate_args: Sequence[str] = (), *,
                             force="reference", **kwargs) -> BenchmarkReport:
    """:func:`benchmark` with every model forced to the same output lengths.

    ``force="reference"`` (default): forced decoding of each reference (EOS included), so
    every model emits exactly the reference's tokens; ``force=L``: every output is L tokens
    + EOS. Speed differences are then architecture only, not output length. BLEU of the
    reference-forced decode is 100 by construction.
    """
    if _parse_force(force) is None:
        raise ValueError("benchmark_forced_lengths needs force='reference' or an int")
    return benchmark(checkpoints, data, generate_args, force=force, **kwargs)
