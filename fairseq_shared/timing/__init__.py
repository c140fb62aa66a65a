"""Decode a test set with fairseq's own generator and measure decoding speed properly.

Everything that produces translations is fairseq's: the options come from
``options.get_generation_parser()`` (so every ``fairseq-generate`` flag means what it means
there: ``--beam``, ``--lenpen``, ``--batch-size``/``--max-tokens``, ``--cpu``, ``--fp16``,
``--bpe sentencepiece --sentencepiece-model``, ``--post-process sentencepiece`` ...), the model
is loaded with ``checkpoint_utils.load_model_ensemble``, the generator is
``task.build_generator`` and each batch goes through ``task.inference_step`` exactly as in
``fairseq_cli/generate.py``. Only the bookkeeping around it is new:

* **warm-up and repeats**: ``warmup`` untimed passes (``warmup_batches`` limits a warm-up
  pass to that many of the longest batches), then ``repeats`` timed passes. The timer wraps
  ``task.inference_step`` only, as fairseq-generate's ``gen_timer`` does; the wall time of
  each whole pass (batching, post-processing) is recorded too. The same calls are also timed
  by the process's CPU time (``time.process_time``: ``cpu_seconds``, CPU tokens/s and
  sentences/s, CPU ratios), which other jobs on a shared machine hardly move when decoding
  with one thread (``threads=1``); ``results/archive/san/bench_san_cpu.py`` reported that.
* **interleaving**: with several checkpoints, timed pass ``r`` runs every model once before
  pass ``r + 1`` starts (the order rotates each round), so drift of the machine (other
  processes, thermal state) hits all models alike. Ratios against the named baseline are the
  median over rounds of the per-round ratio.
* **numbers**: median and spread (min, max, relative IQR) of output tokens/s; sentences/s;
  milliseconds per output token; peak memory (CUDA: ``torch.cuda.max_memory_allocated``;
  CPU: the process's resident set size sampled every 5 ms during the pass, and its growth
  over the pass). Output tokens are counted as fairseq-generate counts them: the top
  hypothesis's tokens including the final EOS. Threads, device, beam, batch, lenpen,
  versions and the host are recorded with the numbers.
* **every sentence counted**: the batch iterator is built with
  ``required_batch_size_multiple=1`` unless told otherwise, the ids decoded in every pass are
  compared with the ids asked for, and :class:`DroppedSentencesError` is raised if any
  sentence is missing or duplicated (fairseq itself only logs a warning when
  ``--skip-invalid-size-inputs-valid-test`` drops a long sentence).
* **quality from the same decode**: hypotheses are detokenized the way fairseq-generate does
  (``--post-process`` then ``--bpe``/``--tokenizer`` decoding) and scored with sacreBLEU
  (BLEU and chrF, signatures kept) against the raw detokenized references (``references=``,
  by default ``<data root>/raw/<subset>.<tgt>`` when it exists, else the binarized targets
  detokenized the same way, which the report then says).

Forced output lengths
---------------------
To separate the speed of an architecture from the lengths of what it happens to output,
:func:`benchmark` (and :func:`benchmark_forced_lengths`, the same call with a required
``force``) can make every model produce outputs of the same length:

``force="reference"``
    forced decoding of the reference: the whole reference, EOS included, is passed to the
    generator as ``prefix_tokens`` (fairseq's ``--prefix-size`` mechanism, extended to the
    full target), so each output has exactly the reference's length and every model does the
    same number of decoder steps per sentence with the same beam. Search runs as usual (beam
    bookkeeping, scoring, caches), only the token choice is fixed. BLEU is then meaningless
    (100) and is reported as such.
``force=L`` (an int, or the string ``"fixed:L"``)
    every output is exactly ``L`` tokens plus EOS (``min_len = max_len_b = L``,
    ``max_len_a = 0``); the tokens are the model's own choice.

Library use::

    from fairseq_shared.timing import benchmark, write_report
    report = benchmark({"vanilla": "ckpt/a.pt", "shared": "ckpt/b.pt"}, "work/bible",
                       ["--beam", "4", "--lenpen", "1.0", "--batch-size", "64", "--cpu"],
                       baseline="vanilla", warmup=1, repeats=3, threads=2,
                       force="reference")
    write_report(report, "out/")   # results.md, results.csv, results.json, hyp.<name>.txt

Command line: ``python -m fairseq_shared.cli.time_generate --help``.

* **decode trace**: every pass of fairseq's eager generator also counts, per batch, the
  decoder steps (incremental ``decoder.forward`` calls), the hypothesis rows alive at each
  step, the output lengths and how many hit the length limit (:mod:`.trace`); the tables
  report CPU milliseconds per decoder step and per sentence-step next to tokens/s, so a
  model that is "faster" only because its searches stop earlier is visible as such.

Modules: :mod:`.session` (setup as fairseq-generate: options, task, sentences, batches,
references), :mod:`.passes` (one timed pass of a loaded model, memory, the sentence-count
check), :mod:`.results` (pass, model and report records), :mod:`.benchmark` (the
interleaved run, ratios, BLEU/chrF), :mod:`.trace` (decoder steps, occupancy, lengths),
:mod:`.report` (Markdown, CSV, JSON, hypotheses).
"""

import fairseq_shared  # noqa: F401  (registers models; compat fixes)
from fairseq_shared.fairseq_commands import USER_DIR
from fairseq_shared.timing.benchmark import benchmark, benchmark_forced_lengths
from fairseq_shared.timing.passes import (
    DroppedSentencesError,
    LoadedModel,
    PeakRSS,
    rss_bytes,
    check_counts,
)
from fairseq_shared.timing.report import CSV_FIELDS, markdown_table, write_report
from fairseq_shared.timing.results import BenchmarkReport, ModelResult, PassResult
from fairseq_shared.timing.trace import BatchTrace, DecoderTrace, summarize
from fairseq_shared.timing.session import (
    Session,
    generation_args,
    parse_generation_cfg,
    resolve_data,
    select_ids,
)

__all__ = [
    "BatchTrace", "BenchmarkReport", "CSV_FIELDS", "DecoderTrace", "DroppedSentencesError", "LoadedModel", "ModelResult",
    "PassResult", "Session", "USER_DIR", "benchmark", "benchmark_forced_lengths",
    "check_counts", "generation_args", "markdown_table", "parse_generation_cfg",
    "resolve_data", "select_ids", "summarize", "write_report", "PeakRSS", "rss_bytes",
]
