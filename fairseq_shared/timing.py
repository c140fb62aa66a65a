"""Decode a test set with fairseq's own generator and measure decoding speed properly.

Everything that produces translations is fairseq's: the options come from
``options.get_generation_parser()`` (so every ``fairseq-generate`` flag means what it means
there: ``--beam``, ``--lenpen``, ``--batch-size``/``--max-tokens``, ``--cpu``, ``--fp16``,
``--bpe sentencepiece --sentencepiece-model``, ``--post-process sentencepiece`` ...), the model
is loaded with ``checkpoint_utils.load_model_ensemble``, the generator is
``task.build_generator`` and each batch goes through ``task.inference_step`` exactly as in
``fairseq_cli/generate.py``. Only the bookkeeping around it is new:

* **warm-up and repeats**: ``warmup`` untimed passes (``warmup_batches`` limits a warm-up
  pass to its first batches), then ``repeats`` timed passes. The timer wraps
  ``task.inference_step`` only, as fairseq-generate's ``gen_timer`` does; the wall time of
  each whole pass (batching, post-processing) is recorded too.
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
"""

import ast
import csv
import json
import logging
import math
import os
import platform
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch

import fairseq_shared  # noqa: F401  (registers models; compat fixes)
from fairseq_shared.data.scoring import score
from fairseq_shared.experiments.commands import USER_DIR

logger = logging.getLogger("fairseq_shared.timing")


class DroppedSentencesError(RuntimeError):
    """A decoding pass did not translate every requested sentence exactly once."""


# ---------------------------------------------------------------------------- data layout
def resolve_data(data: str):
    """``data`` is a prepared corpus root (with ``bin/``, ``raw/``, ``spm.model``) or a
    fairseq binarized directory. Returns ``(bin_dir, root_or_None)``."""
    data = os.path.abspath(data)
    if os.path.isdir(os.path.join(data, "bin")):
        return os.path.join(data, "bin"), data
    parent = os.path.dirname(data)
    if os.path.basename(data) == "bin" and os.path.isdir(os.path.join(parent, "raw")):
        return data, parent
    return data, None


def _has_flag(args: Sequence[str], *flags: str) -> bool:
    return any(a == f or a.startswith(f + "=") for a in args for f in flags)


def generation_args(data: str, path: str, extra: Sequence[str] = ()) -> List[str]:
    """The fairseq-generate command line (without the program name) this module runs.

    Adds ``--user-dir``; ``--required-batch-size-multiple 1`` unless given; and, when the
    corpus root has ``spm.model`` and neither ``--bpe`` nor ``--post-process`` is given,
    ``--bpe sentencepiece --sentencepiece-model <root>/spm.model``.
    """
    bin_dir, root = resolve_data(data)
    args = [bin_dir, "--path", path, *extra]
    if not _has_flag(args, "--user-dir"):
        args += ["--user-dir", USER_DIR]
    if not _has_flag(args, "--required-batch-size-multiple"):
        args += ["--required-batch-size-multiple", "1"]
    if (
        root
        and os.path.exists(os.path.join(root, "spm.model"))
        and not _has_flag(args, "--bpe", "--post-process", "--remove-bpe")
    ):
        args += ["--bpe", "sentencepiece", "--sentencepiece-model", os.path.join(root, "spm.model")]
    return args


def parse_generation_cfg(args: Sequence[str]):
    """Parse a fairseq-generate command line with fairseq's own parser -> omegaconf cfg."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_generation_parser()
    ns = options.parse_args_and_arch(parser, input_args=list(args))
    cfg = convert_namespace_to_omegaconf(ns)
    if cfg.dataset.max_tokens is None and cfg.dataset.batch_size is None:
        cfg.dataset.max_tokens = 12000  # fairseq-generate's default
    return cfg


# ---------------------------------------------------------------------------- memory
class _PeakRSS:
    """Samples this process's resident set size in a thread (CPU peak memory)."""

    def __init__(self, interval=0.005):
        self.interval = interval
        self.peak = self.start = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_bytes())
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: fall back to the (monotone) peak from getrusage
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---------------------------------------------------------------------------- results
@dataclass
class PassResult:
    gen_seconds: float  # time inside task.inference_step, summed over batches
    wall_seconds: float  # the whole pass
    sentences: int
    tokens: int  # output tokens of the top hypotheses, EOS included (fairseq's count)
    peak_mem_mb: float
    mem_growth_mb: float

    @property
    def tokens_per_s(self):
        return self.tokens / self.gen_seconds if self.gen_seconds > 0 else float("nan")

    @property
    def sentences_per_s(self):
        return self.sentences / self.gen_seconds if self.gen_seconds > 0 else float("nan")


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

    def summary(self) -> Dict:
        tps = [p.tokens_per_s for p in self.passes]
        sps = [p.sentences_per_s for p in self.passes]
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


# ---------------------------------------------------------------------------- decoding
def _parse_force(force) -> Optional[Union[str, int]]:
    if force is None or force == "" or force == "none":
        return None
    if isinstance(force, int):
        return force
    if force == "reference":
        return "reference"
    if isinstance(force, str) and force.startswith("fixed:"):
        return int(force.split(":", 1)[1])
    if isinstance(force, str) and force.isdigit():
        return int(force)
    raise ValueError(f"force={force!r}: use None, 'reference', an int L or 'fixed:L'")


def select_ids(num: int, subset: Optional[int]) -> np.ndarray:
    """Ids of the sentences to decode: all, or ``subset`` evenly spaced over the test set."""
    if not subset or subset >= num:
        return np.arange(num, dtype=np.int64)
    return np.unique(np.linspace(0, num - 1, subset).round().astype(np.int64))


class Session:
    """A task, its test set and the shared settings; models are added with :meth:`load`."""

    def __init__(self, data: str, first_path: str, extra_args: Sequence[str] = (),
                 subset: Optional[int] = None, force=None, threads: Optional[int] = None,
                 references: Optional[str] = None):
        from fairseq import tasks, utils

        if threads:
            torch.set_num_threads(int(threads))
        self.args = generation_args(data, first_path, extra_args)
        self.cfg = parse_generation_cfg(self.args)
        cfg = self.cfg
        utils.import_user_module(cfg.common)
        if cfg.common.seed is not None and not cfg.generation.no_seed_provided:
            np.random.seed(cfg.common.seed)
            utils.set_torch_seed(cfg.common.seed)
        self.use_cuda = torch.cuda.is_available() and not cfg.common.cpu
        self.task = tasks.setup_task(cfg.task)
        self.tgt_dict = self.task.target_dictionary
        self.src_dict = getattr(self.task, "source_dictionary", None)
        self.force = _parse_force(force)
        self.overrides = ast.literal_eval(cfg.common_eval.model_overrides)
        self._dataset_loaded = False
        self.subset = subset
        self.references_path = references
        self.tokenizer = self.task.build_tokenizer(cfg.tokenizer)
        self.bpe = self.task.build_bpe(cfg.bpe)
        self._data_root = resolve_data(data)[1]
        self._order = None
        self.models: list = []  # every loaded model (for max_positions, as in generate)

    # -- helpers mirroring fairseq-generate
    def decode_fn(self, x: str) -> str:
        if self.bpe is not None:
            x = self.bpe.decode(x)
        if self.tokenizer is not None:
            x = self.tokenizer.decode(x)
        return x

    def load(self, name: str, path: str) -> "LoadedModel":
        from fairseq import checkpoint_utils, utils

        cfg = self.cfg
        models, saved_cfg = checkpoint_utils.load_model_ensemble(
            utils.split_paths(path),
            arg_overrides=self.overrides,
            task=self.task,
            suffix=cfg.checkpoint.checkpoint_suffix,
            strict=(cfg.checkpoint.checkpoint_shard_count == 1),
            num_shards=cfg.checkpoint.checkpoint_shard_count,
        )
        if not self._dataset_loaded:
            self.task.load_dataset(cfg.dataset.gen_subset, task_cfg=saved_cfg.task)
            self.dataset = self.task.dataset(cfg.dataset.gen_subset)
            self.ids = select_ids(len(self.dataset), self.subset)
            self._dataset_loaded = True
        for model in models:
            if cfg.common.fp16:
                model.half()
            if self.use_cuda:
                model.cuda()
            model.prepare_for_inference_(cfg)
        params = sum(p.numel() for p in models[0].parameters())
        gen_cfg = cfg.generation
        if self.force is not None:
            from omegaconf import OmegaConf

            gen_cfg = OmegaConf.create(OmegaConf.to_container(cfg.generation, resolve=True))
            if self.force == "reference":
                gen_cfg.max_len_a = 0
                gen_cfg.max_len_b = int(max(self.dataset.tgt_sizes)) + 2
                gen_cfg.min_len = 1
            else:
                gen_cfg.max_len_a = 0
                gen_cfg.max_len_b = int(self.force)
                gen_cfg.min_len = int(self.force)
        generator = self.task.build_generator(models, gen_cfg)
        return LoadedModel(self, name, path, models, generator, params)

    def batches(self, max_batches: Optional[int] = None):
        from fairseq import utils

        cfg = self.cfg
        dataset = self.dataset
        if self._order is None:
            from fairseq.data import data_utils

            wanted = set(self.ids.tolist())
            with data_utils.numpy_seed(cfg.common.seed):
                full_order = dataset.ordered_indices()
            self._order = (
                full_order
                if len(wanted) == len(dataset)
                else np.array([i for i in full_order if i in wanted], dtype=np.int64)
            )
        order = self._order
        dataset.ordered_indices = lambda: order  # only this instance; sizes etc. unchanged
        try:
            itr = self.task.get_batch_iterator(
                dataset=dataset,
                max_tokens=cfg.dataset.max_tokens,
                max_sentences=cfg.dataset.batch_size,
                max_positions=utils.resolve_max_positions(
                    self.task.max_positions(), *[m.max_positions() for m in self.models]
                ),
                ignore_invalid_inputs=cfg.dataset.skip_invalid_size_inputs_valid_test,
                required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
                seed=cfg.common.seed,
                num_workers=cfg.dataset.num_workers,
                data_buffer_size=cfg.dataset.data_buffer_size,
                disable_iterator_cache=True,
            ).next_epoch_itr(shuffle=False)
        finally:
            del dataset.ordered_indices
        for k, sample in enumerate(itr):
            if max_batches is not None and k >= max_batches:
                break
            yield sample

    def references(self) -> (List[str], str):
        """Detokenized references for the selected ids, and where they came from."""
        cfg = self.cfg
        path = self.references_path
        if path is None and self._data_root is not None:
            cand = os.path.join(
                self._data_root, "raw", f"{cfg.dataset.gen_subset}.{self.task.cfg.target_lang}"
            )
            if os.path.exists(cand):
                path = cand
        if path:
            with open(path, encoding="utf-8") as f:
                lines = [line.rstrip("\n") for line in f]
            if len(lines) != len(self.dataset):
                raise DroppedSentencesError(
                    f"references {path} have {len(lines)} lines but the binarized "
                    f"'{cfg.dataset.gen_subset}' set has {len(self.dataset)} sentences"
                )
            return [lines[i] for i in self.ids], path
        refs = []
        for i in self.ids:
            tgt = self.dataset.tgt[int(i)]
            s = self.tgt_dict.string(
                tgt, cfg.common_eval.post_process, escape_unk=True,
                extra_symbols_to_ignore={self.tgt_dict.eos()},
            )
            refs.append(self.decode_fn(s))
        return refs, "binarized targets, detokenized"

    def settings(self) -> Dict:
        cfg = self.cfg
        import fairseq
        import sacrebleu

        cpu_name = ""
        try:
            with open("/proc/cpuinfo") as f:
                cpu_name = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
        except OSError:
            pass
        return {
            "device": torch.cuda.get_device_name() if self.use_cuda else "cpu",
            "cpu_model": cpu_name or platform.processor(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "fp16": bool(cfg.common.fp16),
            "beam": cfg.generation.beam,
            "lenpen": cfg.generation.lenpen,
            "max_len_a": cfg.generation.max_len_a,
            "max_len_b": cfg.generation.max_len_b,
            "batch_size": cfg.dataset.batch_size,
            "max_tokens": cfg.dataset.max_tokens,
            "required_batch_size_multiple": cfg.dataset.required_batch_size_multiple,
            "gen_subset": cfg.dataset.gen_subset,
            "sentences_in_set": len(self.dataset),
            "sentences_decoded": int(len(self.ids)),
            "subset": (
                "all" if len(self.ids) == len(self.dataset)
                else f"{len(self.ids)} of {len(self.dataset)}, evenly spaced by id"
            ),
            "force_lengths": self.force,
            "post_process": cfg.common_eval.post_process,
            "bpe": cfg.bpe._name if cfg.bpe is not None and "_name" in cfg.bpe else None,
            "torch": torch.__version__,
            "fairseq": fairseq.__version__,
            "sacrebleu": sacrebleu.__version__,
            "host": platform.node(),
            "python": platform.python_version(),
            "generate_args": " ".join(self.args[1:]),
        }


class LoadedModel:
    def __init__(self, session: Session, name, path, models, generator, params):
        self.session, self.name, self.path = session, name, path
        self.models, self.generator, self.params = models, generator, params
        session.models.extend(models)

    def run_pass(self, max_batches: Optional[int] = None, check: bool = True):
        """One pass over the selected sentences. Returns ``(PassResult, {id: tokens})``."""
        from fairseq import utils

        s = self.session
        cfg = s.cfg
        outputs: Dict[int, List[int]] = {}
        duplicates = []
        gen_seconds = 0.0
        n_tokens = 0
        if s.use_cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        wall0 = time.perf_counter()
        with _PeakRSS() as mem:
            for sample in s.batches(max_batches):
                sample = utils.move_to_cuda(sample) if s.use_cuda else sample
                if "net_input" not in sample:
                    continue
                prefix_tokens = None
                if s.force == "reference":
                    prefix_tokens = sample["target"]
                elif cfg.generation.prefix_size > 0:
                    prefix_tokens = sample["target"][:, : cfg.generation.prefix_size]
                constraints = sample.get("constraints")
                t0 = time.perf_counter()
                hypos = s.task.inference_step(
                    self.generator, self.models, sample,
                    prefix_tokens=prefix_tokens, constraints=constraints,
                )
                if s.use_cuda:
                    torch.cuda.synchronize()
                gen_seconds += time.perf_counter() - t0
                for i, sid in enumerate(sample["id"].tolist()):
                    toks = hypos[i][0]["tokens"].int().cpu().tolist()
                    n_tokens += len(toks)
                    if sid in outputs:
                        duplicates.append(sid)
                    outputs[sid] = toks
        wall = time.perf_counter() - wall0
        if s.use_cuda:
            peak = torch.cuda.max_memory_allocated() / 2**20
            growth = peak
        else:
            peak, growth = mem.peak / 2**20, (mem.peak - mem.start) / 2**20
        if check and max_batches is None:
            check_counts(s.ids, outputs, duplicates, self.name)
        return PassResult(gen_seconds, wall, len(outputs), n_tokens, peak, growth), outputs

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
    progress=print,
) -> BenchmarkReport:
    """Decode ``data``'s test set (``--gen-subset``) with every checkpoint and time it.

    ``checkpoints``: ordered ``{name: checkpoint path}``. ``generate_args``: any
    fairseq-generate options (``--beam 4 --lenpen 1.0 --batch-size 64 --cpu ...``).
    ``baseline``: the name that speed ratios are relative to (default: the first).
    ``warmup``/``warmup_batches``: untimed passes (and how many batches each; None = all).
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
                      force=force, threads=threads, references=references)
    loaded = []
    for name in names:
        progress(f"[decode] loading {name}: {checkpoints[name]}")
        loaded.append(session.load(name, checkpoints[name]))
    results = {m.name: ModelResult(m.name, m.path, m.params) for m in loaded}
    first_outputs: Dict[str, Dict[int, List[int]]] = {}
    for w in range(warmup):
        for m in loaded:
            t0 = time.perf_counter()
            m.run_pass(max_batches=warmup_batches, check=warmup_batches is None)
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
            elif outputs != first_outputs[m.name]:
                results[m.name].deterministic = False
            done = r * n + k + 1
            elapsed = time.perf_counter() - t_start
            eta = elapsed / done * (repeats * n - done)
            progress(
                f"[decode] pass {r + 1}/{repeats} {m.name}: {res.sentences} sentences, "
                f"{res.tokens} tokens, {res.gen_seconds:.2f}s, {res.tokens_per_s:.1f} tok/s "
                f"({done}/{repeats * n}, elapsed {elapsed:.0f}s, ETA {eta:.0f}s)"
            )
    # ratios: median over rounds of the per-round ratio against the baseline
    base = results[baseline]
    for res in results.values():
        res.speed_ratio = statistics.median(
            p.tokens_per_s / b.tokens_per_s for p, b in zip(res.passes, base.passes)
        )
        res.sent_speed_ratio = statistics.median(
            p.sentences_per_s / b.sentences_per_s for p, b in zip(res.passes, base.passes)
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
        warmup_batches=warmup_batches if warmup_batches is not None else "all",
        timed_passes=repeats,
        interleaved=True,
        references=ref_source,
        timer="task.inference_step only (as fairseq-generate's gen_timer)",
        tokens_counted="top hypothesis tokens incl. EOS (as fairseq-generate)",
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


# ---------------------------------------------------------------------------- output
def _fmt(x, spec):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def markdown_table(report: BenchmarkReport) -> str:
    s = report.settings
    lines = [
        f"Decoding `{s['gen_subset']}` ({s['subset']}), beam {s['beam']}, lenpen {s['lenpen']}, "
        f"batch size {s['batch_size']}, max tokens {s['max_tokens']}, device {s['device']} "
        f"({s['cpu_model']}), {s['torch_threads']} threads, fp16 {s['fp16']}, "
        f"forced lengths: {s['force_lengths']}; {s['warmup_passes']} warm-up + "
        f"{s['timed_passes']} timed passes, interleaved; speed = median over passes, "
        f"ratios = median per-round ratio vs `{report.baseline}`.",
        "",
        "| model | params | BLEU | chrF | sentences | out tokens | tok/s (median) | tok/s min-max | "
        "sent/s | ms/token | speed vs baseline | peak mem MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.rows():
        lines.append(
            f"| {r['model']} | {r['params']:,} | {_fmt(r['bleu'], '.2f')} | {_fmt(r['chrf'], '.2f')} "
            f"| {r['sentences']} | {r['output_tokens']} | {_fmt(r['tokens_per_s_median'], '.1f')} "
            f"| {_fmt(r['tokens_per_s_min'], '.1f')}-{_fmt(r['tokens_per_s_max'], '.1f')} "
            f"| {_fmt(r['sentences_per_s_median'], '.2f')} | {_fmt(r['ms_per_token'], '.2f')} "
            f"| x{_fmt(r['speed_vs_baseline'], '.2f')} | {_fmt(r['peak_mem_mb'], '.0f')} |"
        )
    sig = next((m.bleu_signature for m in report.models if m.bleu_signature), "")
    csig = next((m.chrf_signature for m in report.models if m.chrf_signature), "")
    lines += ["", f"BLEU signature: `{sig}`", f"chrF signature: `{csig}`",
              f"References: {s['references']}"]
    if s["force_lengths"] == "reference":
        lines.append("Outputs forced to the references: BLEU/chrF are 100 by construction.")
    return "\n".join(lines) + "\n"


CSV_FIELDS = [
    "model", "checkpoint", "params", "bleu", "chrf", "sentences", "output_tokens",
    "tokens_per_s_median", "tokens_per_s_min", "tokens_per_s_max", "tokens_per_s_rel_iqr",
    "sentences_per_s_median", "ms_per_token", "gen_seconds_median", "wall_seconds_median",
    "peak_mem_mb", "mem_growth_mb", "speed_vs_baseline", "sent_speed_vs_baseline",
    "timed_passes", "deterministic",
]


def write_report(report: BenchmarkReport, out_dir: str, prefix: str = "results") -> Dict[str, str]:
    """Write ``<prefix>.md``, ``<prefix>.csv``, ``<prefix>.json`` and ``hyp.<name>.txt``."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f"{prefix}.{k}") for k in ("md", "csv", "json")}
    with open(paths["md"], "w", encoding="utf-8") as f:
        f.write(markdown_table(report))
    with open(paths["csv"], "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS + ["settings"])
        w.writeheader()
        for r in report.rows():
            w.writerow({**{k: r[k] for k in CSV_FIELDS}, "settings": json.dumps(report.settings)})
    with open(paths["json"] + ".tmp", "w", encoding="utf-8") as f:
        json.dump(report.to_json(), f, indent=2, default=str)
    os.replace(paths["json"] + ".tmp", paths["json"])
    for m in report.models:
        with open(os.path.join(out_dir, f"hyp.{m.name}.txt"), "w", encoding="utf-8") as f:
            f.write("".join(h + "\n" for h in m.hypotheses))
    return paths
