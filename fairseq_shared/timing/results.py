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

    def summary(self) -> Dict:
        tps = [p.tokens_per_s for p in self.passes]
        sps = [p.sentences_per_s for p in self.passes]
        cpu_tps = _median_min_max([p.cpu_tokens_per_s for p in self.passes])
        cpu_sps = _median_min_max([p.cpu_sentences_per_s for p in self.passes])
        cpu_sec = _median_min_max([p.cpu_seconds for p in self.passes])[0]
        q1, q3 = (np.percentile(tps, [25, 75]) if tps else (float("nan"),) * 2)
        med = statistics.median(tps) if tps else float("nan")
        gen = statistics.median([p.gen_seconds for p in self.passes]) if tps else float("nan")
        last = self.passes[-1] if self.passes else None
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
