"""The experiments' catalogue: configurations (:data:`CONFIGS`, the tables they appear in) and
budgets (:data:`BUDGETS`), and how a budget, a depth expression or a selection is read.

A configuration is a name, the tables it appears in, an architecture and the per-stack
sharing as multiples of the budget's base depth ``L``. A budget fixes width, base depth,
updates, minutes, batch, threads and decoding settings for all configurations alike.
"""

import json
import math
import os
import re
from typing import Dict, List, Optional, Tuple

# N and M are "L" multiples ("L", "2L", "3L", "L/2" = ceil(L/2)) or plain integers.
# strategy/scope apply to both stacks (each stack on its own, as in Takase & Kiyono).
CONFIGS: List[Dict] = [
    dict(name="vanilla", tables=["takase", "albert", "xiao"], label="Vanilla",
         strategy="none", N="L", M="L"),
    # the equal-compute upper bound of the N=2L shared rows: as deep, unshared (2x parameters)
    dict(name="vanilla_2L", tables=["takase"], label="Vanilla (2L layers)",
         strategy="none", N="2L", M="2L"),
    dict(name="universal", tables=["takase", "albert"], label="Universal",
         strategy="universal", N="L", M=1),
    # the paper's universal row is wider (1024/4096) to roughly match vanilla's parameters;
    # optional (about 3-4x the cost of vanilla): select it with --configs ...,universal_wide
    dict(name="universal_wide", tables=["takase"], label="Universal (2x wider)",
         strategy="universal", N="L", M=1, width_mult=2, default=False),
    dict(name="sequence_2L", tables=["takase"], label="Sequence", strategy="sequence",
         N="2L", M="L"),
    dict(name="cycle_2L", tables=["takase"], label="Cycle", strategy="cycle", N="2L", M="L"),
    dict(name="cycle_rev_2L", tables=["takase", "xiao"], label="Cycle (rev)",
         strategy="cycle_rev", N="2L", M="L"),
    dict(name="sequence_3L", tables=["takase"], label="Sequence", strategy="sequence",
         N="3L", M="L"),
    dict(name="cycle_3L", tables=["takase"], label="Cycle", strategy="cycle", N="3L", M="L"),
    dict(name="cycle_rev_3L", tables=["takase"], label="Cycle (rev)", strategy="cycle_rev",
         N="3L", M="L"),
    # ALBERT-style ablation (all layers of a stack share; "all" is the universal row above)
    dict(name="attn_shared", tables=["albert"], label="attention only",
         strategy="universal", N="L", M=1, scope="attn"),
    dict(name="ffn_shared", tables=["albert"], label="FFN only",
         strategy="universal", N="L", M=1, scope="ffn"),
    dict(name="attn_grouped", tables=["albert"], label="attention only, grouped",
         strategy="sequence", N="L", M="L/2", scope="attn"),
    dict(name="all_grouped", tables=["albert"], label="all, grouped",
         strategy="sequence", N="L", M="L/2", scope="all"),
    # Xiao et al. 2019: attention-weight sharing in the decoder (transformer_san's default
    # policies: self {1},{2..N}; encoder-decoder in adjacent pairs)
    dict(name="san", tables=["xiao"], label="SAN", arch="transformer_san",
         strategy="none", N="L", M="L"),
    dict(name="san_cycle_rev_2L", tables=["xiao"], label="SAN + Cycle (rev)",
         arch="transformer_san", strategy="cycle_rev", N="2L", M="L"),
    # the SAN pair of the evidence runs: encoder L, decoder 2L (the paper's policies for a
    # 6-layer decoder at L=3: self 1,5, cross 2,2,2)
    dict(name="vanilla_dec2L", tables=["xiao"], label="Vanilla (decoder 2L)",
         strategy="none", N="L", M="L", decoder_N="2L", default=False),
    dict(name="san_dec2L", tables=["xiao"], label="SAN (decoder 2L)", arch="transformer_san",
         strategy="none", N="L", M="L", decoder_N="2L", default=False),
    # Kasai et al. 2021, deep encoder / shallow decoder, stock fairseq: encoder 2L, decoder 1.
    # At the evidence budget (L=3, d=128, clean Bible vocabulary; models.build.count_params) 6+1 has
    # 2,479,744 parameters, +65,664 (+2.7%) over vanilla 3+3's 2,414,080: the closest pair
    # with a 1-layer decoder (5+1: 2,281,472, -5.5%; 7+1: 2,678,016, +10.9%) and closer
    # than 4+2 (2,347,776, -66,304); an encoder layer is 198,272, a decoder layer 264,320.
    dict(name="vanilla_2L_dec1", tables=["budget"], label="Vanilla, deep encoder 2L / decoder 1",
         strategy="none", N="2L", M="2L", decoder_N=1, default=False),
    # One Wide FFN (Pires et al. 2023): one encoder FFN shared by every encoder layer, widened to
    # vanilla 3+3's parameters (models/wide_ffn.py: exact width 3077.479 at d=128, f=512, L=3,
    # 8,008 symbols; 3077 gives 2,413,957 = vanilla - 123), and no decoder FFN; the later
    # --encoder-ffn-embed-dim of `extra` overrides the budget's 512.
    dict(name="one_wide_ffn", tables=["budget"], label="One wide FFN (encoder), no decoder FFN",
         arch="transformer_one_wide_ffn", strategy="none", encoder_strategy="universal",
         N="L", M="L", extra=["--encoder-share-scope", "ffn", "--encoder-ffn-embed-dim", "3077",
                              "--decoder-no-ffn"], default=False),
    # issue 35: sharing where depth is cheap. Decoding time is in the decoder and the search,
    # and the encoder runs once a sentence, so the encoder's depth is bought by sharing: 12
    # encoder layers over 6 sets by cycle_rev (the existing flags: encoder strategy cycle_rev,
    # decoder none) under 1 decoder layer, exactly 6+1's parameters (2,479,744 at the budget).
    dict(name="cycle_rev_4L_dec1", tables=["budget"],
         label="Cycle (rev), deep encoder 4L over 2L sets / decoder 1", strategy="none",
         encoder_strategy="cycle_rev", N="4L", M="2L", decoder_N=1, default=False,
         pair="vanilla_2L_dec1"),
    # issue 55: at cycle_rev 6+6/3's size (2,414,080 at the budget), narrow or share, and does a
    # shared layer that knows its depth pay? (models.build.count_params with the budget corpus's
    # dictionaries, results/bible_budget/corpus). vanilla 6+6 at d = 96, 4 heads (head dim 24),
    # FFN 416: 2,409,984 (-0.17%). d = 96 keeps the other rows' 4 heads and a width CTranslate2's
    # int8 kernels take in whole 16-wide blocks; FFN 416 (4.33 d, 32-aligned) is the width that
    # lands within 0.2% (384 = 4 d: 2,335,872, -3.2%); d = 98 with 7 heads of 14 (2,417,464,
    # +0.14%) would be as close but an odd head size. The later flags of `extra` override the
    # budget's 128/512.
    dict(name="vanilla_2L_narrow", tables=["budget"], label="Vanilla (2L layers), narrow (d 96)",
         strategy="none", N="2L", M="2L", default=False, pair="cycle_rev_2L",
         extra=["--encoder-embed-dim", "96", "--decoder-embed-dim", "96",
                "--encoder-ffn-embed-dim", "416", "--decoder-ffn-embed-dim", "416"]),
    # cycle_rev 6+6/3 whose every depth has its own LayerNorm gains and biases and its own linear
    # biases (a per-depth scale and shift, FiLM-like): 2,426,368 (+0.51%)
    dict(name="cycle_rev_2L_depthcond", tables=["budget"],
         label="Cycle (rev), untied norms and biases", strategy="cycle_rev", N="2L", M="L",
         default=False, pair="cycle_rev_2L",
         extra=["--encoder-untie-norms", "--decoder-untie-norms", "--encoder-untie-biases",
                "--decoder-untie-biases"]),
    # cycle_rev 6+6/3 with a rank-8 LoRA delta per depth: 2,684,416 trained (+11.2%); its exports
    # merge the deltas, so it deploys as an unshared 6+6 (3,802,624)
    dict(name="cycle_rev_2L_lora8", tables=["budget"], label="Cycle (rev), LoRA rank 8",
         strategy="cycle_rev", N="2L", M="L", default=False, pair="cycle_rev_2L",
         extra=["--encoder-share-lora-rank", "8", "--decoder-share-lora-rank", "8"]),
    # the paper's other row: vanilla with the decoder's FFNs dropped (2,018,176 parameters)
    dict(name="nodec_ffn", tables=["budget"], label="Vanilla, no decoder FFN",
         arch="transformer_one_wide_ffn_nodec", strategy="none", N="L", M="L",
         extra=["--decoder-no-ffn"], default=False),
]


def _distilled(name: str) -> Dict:
    """Configuration ``name`` trained on the teacher's distilled corpus
    (:mod:`fairseq_shared.distill.run`): ``data: distilled`` trains on
    ``<corpus>/distilled/bin``, whose valid and test sets keep their real references."""
    config = next(c for c in CONFIGS if c["name"] == name)
    return dict(config, name=f"{name}_distilled", label=f"{config['label']}, distilled",
                tables=["budget"], data="distilled", default=False, pair=name)


CONFIGS += [_distilled(n) for n in ("vanilla", "vanilla_2L_dec1", "cycle_rev_4L_dec1")]

TABLES = ("takase", "albert", "xiao")
#: each table's unshared baseline (the budget report compares a configuration with the
#: baseline of its first table, where that is not vanilla 3+3)
BASELINES = {"takase": "vanilla", "albert": "vanilla", "xiao": "vanilla_dec2L"}

# ---------------------------------------------------------------------------- budgets
# decode_threads: 1 by default. On a 2-core machine shared with anything else, 2 intra-op
# threads made beam search ~7x slower than 1 thread (OpenMP oversubscription), and small-batch
# decoding gains little from a second thread anyway; the count is recorded with the numbers.
_DECODE_DEFAULTS = dict(beam=4, lenpen=1.0, batch_size=64, subset=None, repeats=3,
                        warmup_passes=1, warmup_batches=None, max_len_a=1.2, max_len_b=10,
                        decode_threads=1)
BUDGETS: Dict[str, Dict] = {
    # for tests: seconds per configuration
    "tiny": dict(L=2, dim=16, ffn=32, heads=2, max_update=8, max_minutes=None,
                 max_tokens=1000, lr=0.005, warmup_updates=4, dropout=0.1, threads=1,
                 save_interval_updates=0, log_interval=2, seed=1, device="cpu",
                 **{**_DECODE_DEFAULTS, "beam": 2, "batch_size": 16, "repeats": 1,
                    "warmup_passes": 0, "max_len_a": 1.0, "max_len_b": 5}),
    # the main job (`make demo`): two configurations in ~30 min on 2 CPU cores, on the clean
    # split, the recipe of the evidence runs (d=128, 2k-token batches): there vanilla reached
    # 9.05 BLEU on 200 test verses after 800 updates against the lookup baseline's 6.49, and
    # kept improving. 1,000 updates: on 2 idle cores vanilla ran at 0.58 s/update (2 threads)
    # and cycle_rev at ~1.4x that; the 16-min cap per model binds only on a slower or busy
    # machine (the table then shows the updates reached). Pre-LN (normalize_before): with
    # post-LN, lr 0.002 and 150 warm-up updates the 6+6-layer cycle_rev did not train (valid
    # loss 9.5 -> 11.2 by update 900; demo BLEU 0.01) while pre-LN did (8.45 at update 200
    # against post-LN's 9.63); the papers' 8,000 warm-up updates are what keeps post-LN stable.
    "demo": dict(L=3, dim=128, ffn=512, heads=4, max_update=1000, max_minutes=16,
                 equal_updates=True, normalize_before=True,
                 max_tokens=2048, lr=0.002, warmup_updates=150, dropout=0.1, threads=2,
                 save_interval_updates=400, log_interval=25, seed=1, device="cpu",
                 **{**_DECODE_DEFAULTS, "subset": 200, "repeats": 2, "warmup_batches": 2}),
    # the tables on 2 CPU cores: all 14 default configurations, equal updates (~2 epochs of
    # the Bible corpus); about 8 h on 2 dedicated cores (see results/archive/bible/README.md)
    "small": dict(L=3, dim=256, ffn=1024, heads=4, max_update=600, max_minutes=None,
                  max_tokens=4096, lr=0.0015, warmup_updates=150, dropout=0.1, threads=2,
                  save_interval_updates=100, log_interval=20, seed=1, device="cpu",
                  **{**_DECODE_DEFAULTS, "subset": 300, "repeats": 2, "warmup_batches": 3}),
    # the evidence runs on the clean split (results/bible_clean; the budget command with --budget
    # evidence, harness.budget_curve): 2 runs side by side at
    # 1 thread each; valid loss every 100 updates for the learning curves, all checkpoints kept.
    # d=128 with 2k-token batches: measured here, it reaches a lower valid loss per CPU-second
    # than d=256 with 4k-token batches in this regime (7.88 after ~5 min vs 8.14 after ~12).
    "evidence": dict(L=3, dim=128, ffn=512, heads=4, max_update=2000, max_minutes=None,
                     normalize_before=True,
                     max_tokens=2048, lr=0.002, warmup_updates=150, dropout=0.1, threads=1,
                     save_interval_updates=100, keep_interval_updates=-1, log_interval=25,
                     seed=1, device="cpu",
                     **{**_DECODE_DEFAULTS, "repeats": 1, "warmup_passes": 0}),
    # one GPU: base width, the paper's depth
    "base": dict(L=6, dim=512, ffn=2048, heads=8, max_update=20000, max_minutes=None,
                 max_tokens=8192, lr=0.001, warmup_updates=4000, dropout=0.3, threads=4,
                 save_interval_updates=2000, log_interval=100, seed=1, device="cuda",
                 **{**_DECODE_DEFAULTS, "subset": None, "repeats": 3, "batch_size": 128}),
}

# The budget curves (harness.budget_curve): the evidence recipe trained on to
# 8,000 updates, the test set decoded at each milestone with the evidence decoding settings; the
# last `average_last` interval checkpoints (all that keep_interval_updates keeps) averaged and
# decoded at the end; early stop after `patience` counted validations (one per
# save_interval_updates) without a better valid loss (0: none).
# Two threads, one run at a time: measured x1.44 (3+3) and x1.63 (6+6) over one thread
# (results/bible_budget/thread_rate.json), so a run fits one stretch.
BUDGETS["budget_curve"] = dict(BUDGETS["evidence"], max_update=8000, keep_interval_updates=5,
                               threads=2, milestones="1000,2000,4000,8000", patience=10,
                               average_last=5)
# Takase's pair past 8,000 updates (the evidence issue): the same recipe to 16,000 or the early
# stop, every milestone also decoded and validated as the average of its last 5 checkpoints,
# the final stage's measurement, so that its 8,000-update milestone stands beside the 8,000-
# update runs' final models (results/bible_budget/long/).
BUDGETS["budget_long"] = dict(BUDGETS["budget_curve"], max_update=16000,
                              milestones="2000,4000,8000,12000,16000", average_milestones=True)
# for tests: the same stages in seconds
BUDGETS["tiny_milestones"] = dict(BUDGETS["tiny"], max_update=30, save_interval_updates=10,
                                  keep_interval_updates=3, milestones="10,30", patience=0,
                                  average_last=3)


#: keys a budget may leave out (runs.py reads them with a default)
OPTIONAL_BUDGET_KEYS = ("equal_updates", "normalize_before", "keep_interval_updates",
                        "average_milestones")


def load_budget(name_or_path: str, overrides: Optional[List[str]] = None) -> Dict:
    """A budget by name or JSON file, with ``--set KEY=VALUE`` overrides; every value is
    checked (:func:`check_budget`) before anything runs."""
    if name_or_path in BUDGETS:
        budget = dict(BUDGETS[name_or_path], name=name_or_path)
    elif os.path.exists(name_or_path):
        with open(name_or_path) as f:
            budget = dict(BUDGETS["small"], **json.load(f), name=os.path.basename(name_or_path))
    else:
        raise SystemExit(f"--budget: '{name_or_path}' is neither one of {list(BUDGETS)} "
                         "nor a JSON file")
    origin, known = {}, sorted({*budget, *OPTIONAL_BUDGET_KEYS})
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise SystemExit(f"--set {item}: expected KEY=VALUE with KEY one of {known}")
        budget[key] = _parse_value(value)
        origin[key] = f"--set {item}"
    return check_budget(budget, origin, f"--budget {name_or_path}")


def _count(v, least=1):
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# key -> (is the value allowed, the allowed values in words).
_BUDGET_RULES = {
    **{k: (_count, "an integer >= 1") for k in (
        "L", "dim", "ffn", "heads", "max_update", "max_tokens", "threads", "decode_threads",
        "beam", "batch_size", "repeats", "log_interval")},
    **{k: (lambda v: _count(v, 0), "an integer >= 0") for k in (
        "warmup_passes", "seed", "max_len_b")},
    # inverse_sqrt divides by the warm-up; an Adam step of 1 or more diverges at once
    "warmup_updates": (_count, "an integer >= 1"),
    "save_interval_updates": (lambda v: _count(v, 0), "an integer >= 0 (0: none)"),
    "keep_interval_updates": (lambda v: _count(v, -1), "an integer >= -1 (-1: keep all)"),
    **{k: (lambda v: v is None or _count(v), "an integer >= 1, or none (all)")
       for k in ("subset", "warmup_batches")},
    "max_minutes": (lambda v: v is None or (_number(v) and v > 0), "a number > 0, or none"),
    "dropout": (lambda v: _number(v) and 0 <= v < 1, "a probability in [0, 1)"),
    "lr": (lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "max_len_a": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "lenpen": (_number, "a finite number"),
    "device": (lambda v: v in ("cpu", "cuda"), "cpu or cuda"),
    **{k: (lambda v: isinstance(v, bool), "true or false")
       for k in ("equal_updates", "normalize_before")},
    "name": (lambda v: isinstance(v, str), "a name"),
    # long runs in stages (harness/milestones.py reads and orders the milestones)
    "milestones": (lambda v: isinstance(v, (str, list)) or _count(v),
                   "updates such as 1000,2000,4000"),
    "patience": (lambda v: _count(v, 0), "an integer >= 0 (0: no early stop)"),
    "average_last": (lambda v: _count(v, 0), "an integer >= 0 (0: no averaged final stage)"),
    "average_milestones": (lambda v: isinstance(v, bool), "true or false"),
}


def check_budget(budget: Dict, origin: Optional[Dict[str, str]] = None,
                 default_origin: str = "--budget") -> Dict:
    """The one check of a budget's values: every key known, counts positive, probabilities in
    [0, 1), and the heads dividing the width. Raises SystemExit naming where the value came
    from (``--set max_update=-5`` or the budget) and the allowed values."""
    origin = origin or {}

    def refuse(key, why):
        raise SystemExit(f"{origin.get(key, default_origin)}: {why}")

    for key, value in budget.items():
        if key not in _BUDGET_RULES:
            refuse(key, f"unknown key '{key}'; known: {', '.join(sorted(_BUDGET_RULES))}")
        ok, allowed = _BUDGET_RULES[key]
        if not ok(value):
            refuse(key, f"{key}={value!r} is out of range; allowed: {allowed}")
    if budget.get("dim") and budget.get("heads") and budget["dim"] % budget["heads"]:
        refuse("heads" if "heads" in origin else "dim",
               f"heads={budget['heads']} does not divide dim={budget['dim']}; allowed: a "
               f"divisor of dim")
    if budget.get("max_len_a") == 0 and budget.get("max_len_b") == 0:
        refuse("max_len_b" if "max_len_b" in origin else "max_len_a",
               "max_len_a=0 and max_len_b=0 allow no target token; allowed: max_len_a > 0 or "
               "max_len_b >= 1")
    return budget


def _parse_value(v: str):
    if v.lower() in ("none", "null", ""):
        return None
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def resolve_count(expr, L: int) -> int:
    if isinstance(expr, int):
        return expr
    expr = str(expr).strip()
    m = re.fullmatch(r"(\d*)L(?:/(\d+))?", expr)
    if m:
        return max(1, math.ceil(int(m.group(1) or 1) * L / int(m.group(2) or 1)))
    return int(expr)


def depths(config: Dict, L: int) -> Tuple[int, int]:
    """(encoder layers, decoder layers) of ``config`` at base depth ``L``."""
    N = config.get("N", "L")
    return resolve_count(N, L), resolve_count(config.get("decoder_N", N), L)


def staged(budget: Dict) -> bool:
    """The one decision between a run in stages (milestones, :mod:`harness.milestones`) and a
    run in one stage, its last checkpoint decoded once: whether the budget has milestones."""
    return bool(budget.get("milestones"))


#: the baseline every table row is compared with
BASELINE = "vanilla"


def comparison_pair(config: Dict) -> Optional[str]:
    """The model a configuration is compared with besides vanilla 3+3: its declared ``pair``
    (a distilled student's is the same architecture on raw data, 12+1's the unshared 6+1 of
    equal size), else the baseline of its first evidence table (SAN 3+6's is vanilla 3+6)."""
    pair = config.get("pair") or BASELINES.get((config.get("tables") or [None])[0])
    return pair if pair not in (None, BASELINE, config["name"]) else None


#: the keys of :func:`row_fields`
ROW_FIELDS = ("label", "N", "decoder_N", "pair", "training_data", "validation_interval",
              "threads")


def row_fields(config: Dict, budget: Dict) -> Dict:
    """What a table row of the run needs, written into each of its records (run and
    milestone), so that the tables are rendered from the records alone, whatever the
    catalogue says later: label, depths, comparison pair, training data ("raw" or
    "distilled"), validation interval (updates) and training threads."""
    encoder, decoder = depths(config, budget["L"])
    return {"label": config.get("label", config["name"]), "N": encoder, "decoder_N": decoder,
            "pair": comparison_pair(config), "training_data": config.get("data", "raw"),
            "validation_interval": int(budget.get("save_interval_updates") or 0),
            "threads": int(budget["threads"])}


def select_configs(configs: List[Dict], names: Optional[str], tables: Optional[str]) -> List[Dict]:
    """By name (any configuration), else by table, else every default configuration."""
    chosen = [c for c in configs if c.get("default", True)]
    if tables:
        want = set(tables.split(","))
        unknown = want - set(TABLES)
        if unknown:
            raise SystemExit(f"--tables: unknown {sorted(unknown)}; allowed: {', '.join(TABLES)}")
        chosen = [c for c in chosen if want & set(c.get("tables", []))]
    if names:
        want = names.split(",")
        known = {c["name"]: c for c in configs}
        unknown = [n for n in want if n not in known]
        if unknown:
            raise SystemExit(f"--configs: unknown {unknown}; known: {', '.join(known)}")
        chosen = [known[n] for n in want]
    return chosen
