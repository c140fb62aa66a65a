"""What a timing run measures: one pass (:class:`PassResult`), one model over its passes
(:class:`ModelResult`), the whole run (:class:`BenchmarkReport`)."""

import statistics
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

import numpy as np


@dataclass
class PassResult:
    gen_seconds: float  # time inside task.inference_step, summed over batches
    wall_seconds: float  # the whole pass
    sentences: int
    tokens: int  # output tokens of the top hypotheses, EOS included (fairseq's count)
    peak_mem_mb: float
    mem_growth_mb: float
    # the process's CPU time (time.process_time) inside the same task.inference_step calls
    cpu_seconds: float = float("nan")
    # what beam search did (fairseq_shared.timing.trace.summarize); None when not traced
    trace: Optional[Dict] = None
    threads: Optional[int] = None  # torch.get_num_threads() during the pass

    def __post_init__(self):
        self.batches: List = []  # the pass's BatchTrace records (not serialized with the pass)

    @property
    def cpu_ms_per_step(self):
        """CPU milliseconds per decoder step (encoder and search bookkeeping included)."""
        steps = (self.trace or {}).get("steps")
        return 1000.0 * self.cpu_seconds / steps if steps else float("nan")

    @property
    def cpu_us_per_sentence_step(self):
        """CPU microseconds per sentence and decoder step (a sentence = ``beam`` rows)."""
        n = (self.trace or {}).get("sentence_steps")
        return 1e6 * self.cpu_seconds / n if n else float("nan")

    @property
    def tokens_per_s(self):
        return self.tokens / self.gen_seconds if self.gen_seconds > 0 else float("nan")

    @property
    def sentences_per_s(self):
        return self.sentences / self.gen_seconds if self.gen_seconds > 0 else float("nan")

    @property
    def cpu_tokens_per_s(self):
        return self.tokens / self.cpu_seconds if self.cpu_seconds > 0 else float("nan")

    @property
    def cpu_sentences_per_s(self):
        return self.sentences / self.cpu_seconds if self.cpu_seconds > 0 else float("nan")


def _median_min_max(values: List[float]):
    if not values:
        return (float("nan"),) * 3
    return statistics.median(values), min(values), max(values)


@dataclass
class ModelResult:
    name: str
    path: str
    params: int
    passes: List[PassResult] = field(default_factory=list)
    hypotheses: List[str] = field(default_factory=list)  # detokenized, in id order
    hyp_lengths: List[int] = field(default_factory=list)  # tokens incl. EOS, id order
    deterministic: bool = True  # every timed pass gave the same tokens
    bleu: Optional[float] = None
    chrf: Optional[float] = None
    bleu_signature: str = ""
    chrf_signature: str = ""
    speed_ratio: Optional[float] = None  # median per-round tokens/s ratio vs baseline
    sent_speed_ratio: Optional[float] = None
    cpu_speed_ratio: Optional[float] = None  # the same, on CPU-time tokens/s
    cpu_sent_speed_ratio: Optional[float] = None
    # per-round ratios against the baseline (their spread is the ratio's uncertainty)
    speed_ratios: List[float] = field(default_factory=list)
    cpu_speed_ratios: List[float] = field(default_factory=list)
    # the first timed pass's per-batch trace (BatchTrace.to_json), for trace.<name>.json
    batch_trace: List[Dict] = field(default_factory=list)

    def summary(self) -> Dict:
        tps = [p.tokens_per_s for p in self.passes]
        sps = [p.sentences_per_s for p in self.passes]
        cpu_tps = _median_min_max([p.cpu_tokens_per_s for p in self.passes])
        cpu_sps = _median_min_max([p.cpu_sentences_per_s for p in self.passes])
        cpu_sec_all = _median_min_max([p.cpu_seconds for p in self.passes])
        cpu_sec = cpu_sec_all[0]
        q1, q3 = (np.percentile(tps, [25, 75]) if tps else (float("nan"),) * 2)
        med = statistics.median(tps) if tps else float("nan")
        gen = statistics.median([p.gen_seconds for p in self.passes]) if tps else float("nan")
        last = self.passes[-1] if self.passes else None
        trace = (last.trace if last else None) or {}
        per_step = _median_min_max([p.cpu_ms_per_step for p in self.passes if p.trace])
        per_sent_step = _median_min_max(
            [p.cpu_us_per_sentence_step for p in self.passes if p.trace])
        cpu_ratio = _median_min_max(self.cpu_speed_ratios)
        wall_ratio = _median_min_max(self.speed_ratios)
        return {
            "model": self.name,
            "checkpoint": self.path,
            "params": self.params,
            "bleu": self.bleu,
            "chrf": self.chrf,
            "sentences": last.sentences if last else 0,
            "output_tokens": last.tokens if last else 0,
            "tokens_per_s_median": med,
            "tokens_per_s_min": min(tps) if tps else float("nan"),
            "tokens_per_s_max": max(tps) if tps else float("nan"),
            "tokens_per_s_rel_iqr": float((q3 - q1) / med) if tps and med else float("nan"),
            "sentences_per_s_median": statistics.median(sps) if sps else float("nan"),
            "ms_per_token": 1000.0 * gen / last.tokens if last and last.tokens else float("nan"),
            "gen_seconds_median": gen,
            "wall_seconds_median": statistics.median([p.wall_seconds for p in self.passes])
            if self.passes
            else float("nan"),
            "peak_mem_mb": max(p.peak_mem_mb for p in self.passes) if self.passes else float("nan"),
            "mem_growth_mb": max(p.mem_growth_mb for p in self.passes)
            if self.passes
            else float("nan"),
            "speed_vs_baseline": self.speed_ratio,
            "sent_speed_vs_baseline": self.sent_speed_ratio,
            "cpu_seconds_median": cpu_sec,
            "cpu_tokens_per_s_median": cpu_tps[0],
            "cpu_tokens_per_s_min": cpu_tps[1],
            "cpu_tokens_per_s_max": cpu_tps[2],
            "cpu_sentences_per_s_median": cpu_sps[0],
            "cpu_sentences_per_s_min": cpu_sps[1],
            "cpu_sentences_per_s_max": cpu_sps[2],
            "cpu_ms_per_token": 1000.0 * cpu_sec / last.tokens if last and last.tokens
            else float("nan"),
            "cpu_speed_vs_baseline": self.cpu_speed_ratio,
            "cpu_sent_speed_vs_baseline": self.cpu_sent_speed_ratio,
            "timed_passes": len(self.passes),
            "deterministic": self.deterministic,
            "threads": last.threads if last else None,
            "speed_vs_baseline_min": wall_ratio[1],
            "speed_vs_baseline_max": wall_ratio[2],
            "cpu_speed_vs_baseline_min": cpu_ratio[1],
            "cpu_speed_vs_baseline_max": cpu_ratio[2],
            "cpu_seconds_min": cpu_sec_all[1],
            "cpu_seconds_max": cpu_sec_all[2],
            # what beam search did (the same in every pass of a deterministic model)
            "decoder_steps": trace.get("steps"),
            "sentence_steps": trace.get("sentence_steps"),
            "occupancy": trace.get("occupancy"),
            "tail_steps": trace.get("tail_steps"),
            "hit_max_len": trace.get("hit_max"),
            "max_steps_per_batch": trace.get("max_steps_per_batch"),
            "steps_per_sentence": trace["sentence_steps"] / last.sentences
            if trace and last.sentences else None,
            "cpu_ms_per_step": per_step[0],
            "cpu_ms_per_step_min": per_step[1],
            "cpu_ms_per_step_max": per_step[2],
            "cpu_us_per_sentence_step": per_sent_step[0],
            "decoder_cpu_share": trace["decoder_cpu_seconds"] / last.cpu_seconds
            if trace and last.cpu_seconds > 0 else None,
        }


@dataclass
class BenchmarkReport:
    settings: Dict
    models: List[ModelResult]
    baseline: Optional[str]

    def rows(self) -> List[Dict]:
        return [m.summary() for m in self.models]

    def to_json(self) -> Dict:
        return {
            "settings": self.settings,
            "baseline": self.baseline,
            "results": self.rows(),
            "passes": {m.name: [asdict(p) for p in m.passes] for m in self.models},
            "bleu_signature": next((m.bleu_signature for m in self.models if m.bleu_signature), ""),
            "chrf_signature": next((m.chrf_signature for m in self.models if m.chrf_signature), ""),
        }
