"""What beam search did in a timed pass: decoder steps, batch occupancy, output lengths.

fairseq's ``SequenceGenerator`` decodes a batch step by step until every sentence in it has
``beam`` finished hypotheses (or the batch reaches its length limit), so the work of a pass is
its number of incremental decoder calls times their size, not its output tokens: a weak model
whose beams stay alive long after its best hypothesis ended does many more steps for the same
output. :class:`DecoderTrace` counts them without copying any fairseq code: for the duration
of a pass it wraps the first model's ``decoder.forward`` (what ``EnsembleModel.forward_decoder``
calls once per step) and records, per call, how many hypothesis rows (alive sentences x beam)
were fed, plus the CPU and wall time spent inside the call.

Per batch (:class:`BatchTrace`): sentences, the generator's length limit for it
(``min(int(max_len_a * padded source length + max_len_b), max positions - 1)`` tokens before
the EOS), decoder steps, rows per step, and the top hypotheses' lengths (EOS included); a
hypothesis of ``limit + 1`` tokens hit the limit. :func:`summarize` turns a pass's batches
into the numbers the tables report.
"""

import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional


@dataclass
class BatchTrace:
    sentences: int
    beam: int
    max_len: int  # the generator's limit for this batch: tokens before the forced EOS
    rows: List[int] = field(default_factory=list)  # hypothesis rows fed at each decoder step
    out_lengths: List[int] = field(default_factory=list)  # top hypotheses, EOS included
    decoder_cpu_seconds: float = 0.0
    decoder_wall_seconds: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.rows)

    @property
    def alive(self) -> List[int]:
        """Sentences still being searched at each step (fairseq keeps ``beam`` rows each)."""
        return [r // self.beam for r in self.rows]

    @property
    def hit_max(self) -> int:
        return sum(1 for n in self.out_lengths if n >= self.max_len + 1)

    def to_json(self) -> Dict:
        return {**asdict(self), "steps": self.steps, "hit_max": self.hit_max}


class DecoderTrace:
    """Counts the incremental decoder calls of a fairseq generator, batch by batch.

    ``with DecoderTrace(generator) as trace:`` then, around each ``inference_step``,
    ``trace.start_batch(sample)`` and ``trace.end_batch(hypos)``. ``available`` is False for
    a generator whose decoder cannot be wrapped (a TorchScript-compiled one): its batches
    then stay empty."""

    def __init__(self, generator):
        model = getattr(generator, "model", None)  # fairseq's EnsembleModel
        models = getattr(model, "models", None)
        self.generator = generator
        self.decoder = models[0].decoder if models is not None and len(models) else None
        self.available = self.decoder is not None
        self.beam = int(getattr(generator, "beam_size", 1))
        self.batches: List[BatchTrace] = []
        self._current: Optional[BatchTrace] = None

    def __enter__(self):
        if not self.available:
            return self
        inner = self.decoder.forward  # the bound method EnsembleModel calls

        def forward(prev_output_tokens, *args, **kwargs):
            c0, t0 = time.process_time(), time.perf_counter()
            out = inner(prev_output_tokens, *args, **kwargs)
            batch = self._current
            if batch is not None:
                batch.rows.append(int(prev_output_tokens.size(0)))
                batch.decoder_cpu_seconds += time.process_time() - c0
                batch.decoder_wall_seconds += time.perf_counter() - t0
            return out

        self.decoder.forward = forward  # an instance attribute shadows the method
        return self

    def __exit__(self, *exc):
        if self.available:
            del self.decoder.forward

    def limit(self, sample) -> int:
        """The generator's maximum output length for this batch (tokens before the EOS)."""
        g = self.generator
        src_len = sample["net_input"]["src_tokens"].size(1)
        if getattr(g, "match_source_len", False):
            return int(sample["net_input"]["src_lengths"].max())
        return min(int(g.max_len_a * src_len + g.max_len_b), int(g.max_len) - 1)

    def start_batch(self, sample):
        if not self.available:
            return
        self._current = BatchTrace(int(sample["id"].numel()), self.beam, self.limit(sample))

    def end_batch(self, out_lengths: List[int]):
        if self._current is None:
            return
        self._current.out_lengths = list(out_lengths)
        self.batches.append(self._current)
        self._current = None


def summarize(batches: List[BatchTrace]) -> Optional[Dict]:
    """A pass's trace in numbers (None when nothing was traced).

    ``steps``: decoder calls; ``sentence_steps``/``row_steps``: sentences/hypothesis rows
    decoded summed over steps; ``occupancy``: ``sentence_steps`` over what full batches for
    every step would be; ``tail_steps``: steps a batch ran after its longest top hypothesis
    (search still going for hypotheses that were not the output); ``hit_max``: outputs that
    reached the length limit."""
    if not batches:
        return None
    steps = sum(b.steps for b in batches)
    sentence_steps = sum(sum(b.alive) for b in batches)
    full = sum(b.sentences * b.steps for b in batches)
    lengths = [n for b in batches for n in b.out_lengths]
    return {
        "batches": len(batches),
        "steps": steps,
        "sentence_steps": sentence_steps,
        "row_steps": sum(sum(b.rows) for b in batches),
        "occupancy": sentence_steps / full if full else float("nan"),
        "max_steps_per_batch": max(b.steps for b in batches),
        "tail_steps": sum(b.steps - max(b.out_lengths, default=0) for b in batches),
        "hit_max": sum(b.hit_max for b in batches),
        "mean_out_length": sum(lengths) / len(lengths) if lengths else float("nan"),
        "max_out_length": max(lengths, default=0),
        "decoder_cpu_seconds": sum(b.decoder_cpu_seconds for b in batches),
        "decoder_wall_seconds": sum(b.decoder_wall_seconds for b in batches),
    }
