"""One timed decoding pass of one loaded model (:class:`LoadedModel`), its memory sampling, and
the check that every asked-for sentence was decoded exactly once."""

import contextlib
import os
import threading
import time
from typing import Dict, List, Optional

import torch

from fairseq_shared.timing.results import PassResult
from fairseq_shared.timing.trace import DecoderTrace, summarize


class DroppedSentencesError(RuntimeError):
    """A decoding pass did not translate every requested sentence exactly once."""


class PeakRSS:
    """Samples this process's resident set size in a thread (CPU peak memory)."""

    def __init__(self, interval=0.005):
        self.interval = interval
        self.peak = self.start = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: fall back to the (monotone) peak from getrusage
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class LoadedModel:
    """One checkpoint loaded into a :class:`~fairseq_shared.timing.session.Session`."""

    def __init__(self, session, name, path, models, generator, params):
        self.session, self.name, self.path = session, name, path
        self.models, self.generator, self.params = models, generator, params
        session.models.extend(models)

    def run_pass(self, max_batches: Optional[int] = None, check: bool = True,
                 trace: bool = True, longest: bool = False):
        """One pass over the selected sentences. Returns ``(PassResult, {id: tokens})``.

        ``max_batches``: only the first N batches (``longest``: the last N, the longest).
        ``trace``: count decoder steps, occupancy and output lengths per batch
        (:mod:`.trace`; ``PassResult.trace`` and ``.batches``; not available for a
        TorchScript-compiled generator, whose trace stays None).

        Two clocks wrap the same ``task.inference_step`` calls: ``time.perf_counter``
        (``gen_seconds``) and ``time.process_time`` (``cpu_seconds``: CPU time of this whole
        process, every thread, so with ``threads=1`` it is the decode's own work and other
        jobs on the machine hardly move it; the 5 ms RSS sampler thread adds a little)."""
        from fairseq import utils

        s = self.session
        cfg = s.cfg
        outputs: Dict[int, List[int]] = {}
        duplicates = []
        gen_seconds = 0.0
        cpu_seconds = 0.0
        n_tokens = 0
        if s.use_cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if s.threads:  # enforced for every pass: other code in the process may change it
            torch.set_num_threads(s.threads)
        threads = torch.get_num_threads()
        tracer = DecoderTrace(self.generator) if trace else None
        wall0 = time.perf_counter()
        with PeakRSS() as mem, (tracer or contextlib.nullcontext()):
            for sample in s.batches(max_batches, longest=longest):
                sample = utils.move_to_cuda(sample) if s.use_cuda else sample
                if "net_input" not in sample:
                    continue
                prefix_tokens = None
                if s.force == "reference":
                    prefix_tokens = sample["target"]
                elif cfg.generation.prefix_size > 0:
                    prefix_tokens = sample["target"][:, : cfg.generation.prefix_size]
                constraints = sample.get("constraints")
                if tracer:
                    tracer.start_batch(sample)
                c0, t0 = time.process_time(), time.perf_counter()
                hypos = s.task.inference_step(
                    self.generator, self.models, sample,
                    prefix_tokens=prefix_tokens, constraints=constraints,
                )
                if s.use_cuda:
                    torch.cuda.synchronize()
                gen_seconds += time.perf_counter() - t0
                cpu_seconds += time.process_time() - c0
                lengths = []
                for i, sid in enumerate(sample["id"].tolist()):
                    toks = hypos[i][0]["tokens"].int().cpu().tolist()
                    n_tokens += len(toks)
                    lengths.append(len(toks))
                    if sid in outputs:
                        duplicates.append(sid)
                    outputs[sid] = toks
                if tracer:
                    tracer.end_batch(lengths)
        wall = time.perf_counter() - wall0
        if s.use_cuda:
            peak = torch.cuda.max_memory_allocated() / 2**20
            growth = peak
        else:
            peak, growth = mem.peak / 2**20, (mem.peak - mem.start) / 2**20
        if check and max_batches is None:
            check_counts(s.ids, outputs, duplicates, self.name)
        batches = tracer.batches if tracer else []
        result = PassResult(gen_seconds, wall, len(outputs), n_tokens, peak, growth, cpu_seconds,
                            trace=summarize(batches), threads=threads)
        result.batches = batches
        return result, outputs

    def detokenize(self, outputs: Dict[int, List[int]]) -> List[str]:
        from fairseq import utils

        s = self.session
        strip = getattr(self.generator, "symbols_to_strip_from_output", {self.generator.eos})
        hyps = []
        for sid in s.ids.tolist():
            _, hypo_str, _ = utils.post_process_prediction(
                hypo_tokens=torch.tensor(outputs[sid], dtype=torch.int),
                src_str="", alignment=None, align_dict=None, tgt_dict=s.tgt_dict,
                remove_bpe=s.cfg.common_eval.post_process, extra_symbols_to_ignore=strip,
            )
            hyps.append(s.decode_fn(hypo_str))
        return hyps


def check_counts(wanted_ids, outputs: Dict[int, list], duplicates=(), name="model"):
    """Fail loudly unless every wanted id was decoded exactly once (and nothing else)."""
    wanted = set(int(i) for i in wanted_ids)
    got = set(outputs)
    missing, extra = sorted(wanted - got), sorted(got - wanted)
    if missing or extra or duplicates:
        raise DroppedSentencesError(
            f"{name}: asked to translate {len(wanted)} sentences, got {len(got)} distinct "
            f"translations; missing ids {missing[:20]}{'...' if len(missing) > 20 else ''}"
            f" ({len(missing)}), unexpected ids {extra[:20]} ({len(extra)}), duplicated "
            f"ids {sorted(set(duplicates))[:20]}. fairseq dropped sentences (check "
            "--required-batch-size-multiple, --skip-invalid-size-inputs-valid-test, "
            "--max-source-positions/--max-target-positions)."
        )
