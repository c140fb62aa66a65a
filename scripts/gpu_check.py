#!/usr/bin/env python
"""The GPU check's stages (issue 56). ``scripts/gpu_check.sh BUNDLE OUT`` installs the
plug-in from the bundle into a fresh virtual environment and runs each stage below as its
own process under its own time limit; a stage writes ``OUT/stages/STAGE.json``.

    python scripts/gpu_check.py STAGE --device cuda|cpu --out OUT

Stages (``docs/gpu.md`` says what each verifies and its limits):

- ``env``: Python, torch, CUDA, cuDNN, the device, fairseq and the plug-in.
- ``train``: a synthetic word-level corpus (made and binarized here: no sentencepiece), then
  fairseq-train of vanilla, cycle_rev, SAN and LoRA-relaxed (cycle_rev + rank-8 deltas) in
  each precision mode (``MODES``): first and last training loss, finite, falling. fairseq
  0.12's ``--bf16`` implies ``--tpu`` and so needs torch_xla; the stock flag is run once to
  show it (an expected failure), and bf16 is trained through ``fairseq-train-bf16`` below,
  fairseq-train with that one implication removed.
- ``exactness``: every model pattern whose incremental decoding the CPU suite checks
  (read from the test modules: ``exactness_patterns``) on the device: tied tensors stay one
  after ``.half()`` and ``.bfloat16()``, and incremental decoding equals the full pass
  within ``TOLERANCE`` (log-probabilities, max abs).
- ``decode``: beam search (beam 4) of the fp16-trained models in half precision, one run,
  passes interleaved: SAN against vanilla of the same depth (Xiao et al.'s setting), and
  cycle_rev against vanilla of half the depth (3+3 at d = 512: the same parameters), at
  batch 1 and a large batch.
- ``tests``: the core of the suite (``CORE_TESTS``, ``-m "not slow"``: no corpus build, no
  fairseq process) with the device visible.
- ``report``: ``OUT/report.json`` and ``OUT/report.md`` from the stages' files and the time
  table ``OUT/stages.tsv`` that gpu_check.sh keeps.

``--device cpu`` is the rehearsal (``tests/test_gpu_bundle.py``): tiny sizes, fp16 as
``--memory-efficient-fp16 --cpu``, decoding in float32; it proves the bundle, the install
and every stage's code path, not a GPU's numbers.
"""

import argparse
import copy
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("env", "train", "exactness", "decode", "tests", "report")

SIZES = {
    "cuda": dict(dim=512, ffn=2048, heads=8, layers=6, updates=300, max_tokens=4096,
                 warmup=50, lr=7e-4, log_interval=10, parallel=6,
                 corpus=dict(train=20000, valid=200, test=1024),
                 batches=(1, 128), batch1_sentences=32, repeats=3),
    "cpu": dict(dim=32, ffn=64, heads=2, layers=4, updates=12, max_tokens=500,
                warmup=1, lr=5e-3, log_interval=1, parallel=1,
                corpus=dict(train=600, valid=20, test=24),
                batches=(1, 8), batch1_sentences=4, repeats=1),
}
MODELS = ("vanilla", "cycle_rev", "san", "lora")
#: precision mode -> (how fairseq-train is started, its precision flags). On the CPU fp16 is
#: what the CPU can run (``--memory-efficient-fp16 --cpu``) and --amp autocasts nothing
#: (fairseq autocasts for CUDA only): the CPU mode proves the flags' plumbing only.
MODES = {
    "fp16": {"cuda": ("stock", ["--fp16"]),
             "cpu": ("stock", ["--memory-efficient-fp16", "--fp16-init-scale", "8"])},
    "amp": {"cuda": ("stock", ["--amp"]), "cpu": ("stock", ["--amp"])},
    "bf16": {d: ("bf16", ["--bf16"]) for d in ("cuda", "cpu")},
    "bf16_memory_efficient": {d: ("bf16", ["--bf16", "--memory-efficient-bf16"])
                              for d in ("cuda", "cpu")},
}
#: (model, mode) pairs trained in the CPU mode: every model once and every mode once
#: (the CUDA mode trains every model in every mode)
CPU_RUNS = [(m, "fp16") for m in MODELS] + [("cycle_rev", m) for m in MODES if m != "fp16"]
STOCK_BF16_ERROR = "xla"  # fairseq's --bf16 -> --tpu -> torch_xla's xla_device
#: max |incremental - full| of log-probabilities allowed, per dtype (fp16 has a 10-bit
#: mantissa, bf16 7 bits: ~8x coarser); a wrong cache or a lost tie differs by ~1e-1 or more
TOLERANCE = {"float16": 2.5e-2, "bfloat16": 1e-1, "float32": 1e-4}
#: the core of the suite: test files that build models in-process from the bundle's packages
#: only (no corpus build, no fairseq process under -m "not slow", no export extras)
CORE_TESTS = ("test_model.py", "test_sharing.py", "test_san.py", "test_lora.py",
              "test_one_wide_ffn.py", "test_shared_lm.py", "test_layering.py")
#: the CPU rehearsal runs two of them (the whole core runs in the suite itself on the CPU: the
#: rehearsal proves the stage and that pytest and the models import from the bundle alone)
REHEARSAL_TESTS = ("test_lora.py", "test_layering.py")


# ---- helpers -------------------------------------------------------------------------------
def write_stage(out: Path, name: str, result: dict) -> None:
    (out / "stages").mkdir(parents=True, exist_ok=True)
    (out / "stages" / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")


def torch_threads(device: str) -> None:
    import torch

    if device == "cpu":
        torch.set_num_threads(1)


# ---- env -------------------------------------------------------------------------------------
def stage_env(device: str, out: Path, sizes: dict) -> dict:
    import numpy
    import torch

    import fairseq
    import fairseq_shared

    info = {"device": device, "python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "numpy": numpy.__version__,
            "fairseq": fairseq.__version__, "fairseq_shared": fairseq_shared.__version__,
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "fairseq_file": fairseq.__file__, "fairseq_shared_file": fairseq_shared.__file__}
    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("gpu_check: torch sees no CUDA device (pass --cpu for the rehearsal)")
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=torch.cuda.get_device_name(0), gpu_count=torch.cuda.device_count(),
                    capability=".".join(map(str, torch.cuda.get_device_capability(0))),
                    gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    cudnn=torch.backends.cudnn.version(), bf16=torch.cuda.is_bf16_supported())
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=20)
            info["nvidia_smi"] = smi.stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            info["nvidia_smi"] = f"unavailable: {e}"
    standins = out / "standins.txt"
    info["standins"] = standins.read_text().split() if standins.exists() else []
    manifest = os.environ.get("GPU_CHECK_BUNDLE")
    if manifest and Path(manifest, "bundle.json").exists():
        b = json.loads(Path(manifest, "bundle.json").read_text())
        info["bundle"] = {k: b.get(k) for k in ("spec_sha256", "total_bytes", "built")}
    info["sizes"] = sizes
    info["ok"] = True
    return info


# ---- corpus and training -------------------------------------------------------------------
ES = ("uno dos tres cuatro cinco seis siete ocho nueve diez casa perro gato agua sol luna "
      "dios tierra cielo hombre mujer rey dijo dia noche").split()
EN = ("one two three four five six seven eight nine ten house dog cat water sun moon "
      "god earth heaven man woman king said day night").split()


def make_corpus(work: Path, counts: dict) -> Path:
    """A word-for-word Spanish->English toy corpus (the vocabulary of
    fairseq_shared.data.toydata, without its sentencepiece step), binarized with fairseq's
    own preprocess, joined dictionary. Idempotent."""
    import random

    bin_dir = work / "corpus" / "bin"
    if (bin_dir / ".complete").exists():
        return bin_dir
    raw = work / "corpus" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    for split, n in counts.items():
        src, tgt = [], []
        for _ in range(n):
            idx = [rng.randrange(len(ES)) for _ in range(rng.randint(3, 12))]
            src.append(" ".join(ES[i] for i in idx) + " .")
            tgt.append(" ".join(EN[i] for i in idx) + " .")
        (raw / f"{split}.es").write_text("\n".join(src) + "\n")
        (raw / f"{split}.en").write_text("\n".join(tgt) + "\n")
    from fairseq_shared.fairseq_commands import fairseq_tool

    subprocess.run(fairseq_tool("preprocess") + [
        "--source-lang", "es", "--target-lang", "en", "--trainpref", str(raw / "train"),
        "--validpref", str(raw / "valid"), "--testpref", str(raw / "test"),
        "--destdir", str(bin_dir), "--joined-dictionary", "--workers", "1"],
        check=True, capture_output=True, text=True)
    (bin_dir / ".complete").write_text("")
    return bin_dir


def model_flags(name: str, s: dict) -> list:
    n = s["layers"]
    depth = n // 2 if name == "vanilla_half" else n
    flags = ["--encoder-layers", depth, "--decoder-layers", depth,
             "--encoder-embed-dim", s["dim"], "--decoder-embed-dim", s["dim"],
             "--encoder-ffn-embed-dim", s["ffn"], "--decoder-ffn-embed-dim", s["ffn"],
             "--encoder-attention-heads", s["heads"], "--decoder-attention-heads", s["heads"],
             "--share-all-embeddings", "--dropout", "0.1"]
    cycle_rev = ["--arch", "transformer_cycle_rev", "--encoder-unique-layers", n // 2,
                 "--decoder-unique-layers", n // 2]
    blocks = ",".join(["2"] * (n // 2))
    arch = {
        "vanilla": ["--arch", "transformer"],
        "vanilla_half": ["--arch", "transformer"],
        "cycle_rev": cycle_rev,
        "san": ["--arch", "transformer_san", "--san-self-policy", blocks,
                "--san-cross-policy", blocks],
        "lora": cycle_rev + ["--encoder-share-lora-rank", 8, "--decoder-share-lora-rank", 8],
    }[name]
    return [str(x) for x in arch + flags]


LOSS = re.compile(r"train_inner \|.* loss=([^,\s]+)")


def losses_of(log: str) -> list:
    return [float(x) for x in LOSS.findall(log.replace("INFO:train_inner:", "train_inner | "))]


def train_one(name: str, mode: str, data: Path, work: Path, device: str, s: dict,
              updates: int, limit: float) -> dict:
    from fairseq_shared.fairseq_commands import USER_DIR, fairseq_tool

    runner, precision = MODES[mode][device] if mode != "bf16_stock" else ("stock", ["--bf16"])
    save_dir = work / "train" / mode / name
    save_dir.mkdir(parents=True, exist_ok=True)
    exe = fairseq_tool("train") if runner == "stock" else [
        sys.executable, str(Path(__file__).resolve()), "fairseq-train-bf16"]
    cmd = exe + [
        str(data), "--user-dir", USER_DIR, *model_flags(name, s), *precision,
        *(["--cpu"] if device == "cpu" else []),
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", str(s["lr"]),
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(s["warmup"]),
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--max-tokens", str(s["max_tokens"]), "--max-update", str(updates), "--seed", "1",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints", "--no-save-optimizer-state",
        "--disable-validation", "--log-interval", str(s["log_interval"]), "--log-format",
        "simple", "--no-progress-bar", "--num-workers", "0",
    ]
    if mode != "fp16":  # only the fp16 models are decoded
        cmd += ["--no-save"]
    else:  # saved once, at the end (not at every epoch of the small corpus)
        cmd += ["--save-interval", "100000"]
    t0 = time.time()
    if device == "cpu":
        env = dict(os.environ, OMP_NUM_THREADS="1")
    else:  # one GPU per run: with several visible, fairseq-train would train data-parallel
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=first, OMP_NUM_THREADS="2")
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env)
        log, rc = result.stdout + result.stderr, result.returncode
    except subprocess.TimeoutExpired as e:
        log, rc = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {limit:.0f} s", 124
        log = log if isinstance(log, str) else str(log)
    (save_dir / "train.log").write_text(log)
    losses = losses_of(log)
    run = {"model": name, "mode": mode, "flags": precision, "runner": runner, "rc": rc,
           "seconds": round(time.time() - t0, 1), "log": str(save_dir / "train.log")}
    if losses:
        first, last = losses[0], losses[-1]
        run.update(loss_first=first, loss_last=last, logged=len(losses),
                   finite=all(math.isfinite(x) for x in losses), falling=last < first)
    updates_done = re.findall(r"num_updates=(\d+)", log)
    run["updates"] = int(updates_done[-1]) if updates_done else 0
    if mode == "bf16_stock":
        run["status"] = "expected-fail" if rc and STOCK_BF16_ERROR in log else (
            "ok" if rc == 0 else "fail")
        run["error"] = (re.findall(r"\w*Error: .*", log) or [log[-300:]])[-1]
    else:
        run["status"] = "ok" if (rc == 0 and losses and run["finite"] and run["falling"]
                                 and run["updates"] >= updates) else "fail"
        if run["status"] == "fail":
            run["error"] = log[-1500:]
    if mode == "fp16":
        run["checkpoint"] = str(save_dir / "checkpoint_last.pt")
    return run


def stage_train(device: str, out: Path, s: dict, limit: float) -> dict:
    work = out / "work"
    t0 = time.time()
    data = make_corpus(work, s["corpus"])
    runs = [(m, mode) for mode in MODES for m in MODELS] if device == "cuda" else list(CPU_RUNS)
    # the half-depth vanilla (decoded against cycle_rev) and stock --bf16, early: the fp16
    # models that the decode stage needs come first
    runs[len(MODELS):len(MODELS)] = [("vanilla_half", "fp16"), ("vanilla", "bf16_stock")]
    deadline = t0 + limit - 10
    results, lock = {}, threading.Lock()
    note = ("fairseq 0.12: --bf16 sets --tpu (options.parse_args_and_arch), so the trainer "
            "asks torch_xla for its device; the bf16 rows ran through `gpu_check.py "
            "fairseq-train-bf16`, fairseq-train with that implication removed")

    def summary(done: bool) -> dict:
        rows = [results[r] for r in runs if r in results]
        return {"ok": done and all(r["status"] in ("ok", "expected-fail") for r in rows),
                "complete": done, "runs": rows, "corpus": str(data),
                "seconds": round(time.time() - t0, 1), "parallel": s["parallel"],
                "updates": s["updates"], "bf16_note": note}

    def one(run):
        name, mode = run
        updates = 2 if mode == "bf16_stock" else s["updates"]
        left = max(5.0, deadline - time.time())
        result = train_one(name, mode, data, work, device, s, updates, left)
        with lock:  # a stage killed at its limit keeps the runs done so far
            results[run] = result
            write_stage(out, "train", summary(False))

    with ThreadPoolExecutor(max_workers=s["parallel"]) as pool:
        list(pool.map(one, runs))
    return summary(True)


def fairseq_train_bf16(argv: list) -> None:
    """fairseq-train with ``--bf16`` on CUDA (or the CPU): fairseq 0.12 turns ``--bf16``
    into ``--tpu`` after parsing; undo that one step (unless ``--tpu`` was given) and run
    fairseq-train's own ``cli_main``. Nothing else changes: the trainer then casts the model
    and batches to bfloat16 and builds its FP16Optimizer without loss scaling, as it does
    on a TPU."""
    from fairseq import options

    parse = options.parse_args_and_arch

    def parse_without_tpu(*args, **kwargs):
        parsed = parse(*args, **kwargs)
        if getattr(parsed, "bf16", False) and "--tpu" not in argv:
            parsed.tpu = False
        return parsed

    options.parse_args_and_arch = parse_without_tpu
    from fairseq_cli import train

    sys.argv = ["fairseq-train", *argv]
    train.cli_main()


# ---- exactness -------------------------------------------------------------------------------
def exactness_patterns(device: str):
    """(name, kind, build) for every model pattern whose incremental decoding the CPU suite
    checks, read from the test modules themselves (their strategy, scope and policy lists
    and their helpers), so a pattern added there is checked here too. On CUDA the models
    get d = 512, 8 heads, FFN 2048 (the fused attention kernels' sizes); on the CPU the
    suite's tiny sizes."""
    sys.path.insert(0, str(ROOT / "tests"))
    import helpers_lm
    import helpers_model
    import test_lora
    import test_model
    import test_one_wide_ffn
    import test_san
    import test_shared_lm

    big = device == "cuda"
    mt_size = ["--encoder-embed-dim", "512", "--decoder-embed-dim", "512",
               "--encoder-ffn-embed-dim", "2048", "--decoder-ffn-embed-dim", "2048",
               "--encoder-attention-heads", "8", "--decoder-attention-heads", "8"] if big else []
    lm_size = ["--decoder-embed-dim", "512", "--decoder-ffn-embed-dim", "2048",
               "--decoder-attention-heads", "8"] if big else []

    def mt(arch, flags, seed=1, relax=False):
        def build():
            model, task = helpers_model.build_model(arch, list(flags) + mt_size, seed=seed)
            if relax:
                test_lora.relax_randomly(model)
            return model.eval(), task
        return build

    def lm(flags, seed=1):
        def build():
            model, task = helpers_lm.build_lm("transformer_lm_cycle_rev", list(flags) + lm_size,
                                              seed=seed)
            return model.eval(), task
        return build

    tiny = helpers_model.TINY
    yield "fairseq transformer (reference)", "mt", mt("transformer", tiny + [
        "--encoder-layers", "4", "--decoder-layers", "4"])
    for strategy, m in test_model.STRATEGIES:
        for scope in test_model.SCOPES:
            yield f"{strategy} m={m} {scope}", "mt", mt(
                "shared_transformer", tiny + test_model.sharing_flags(strategy, m, scope))
    for strategy, m in test_model.STRATEGIES:
        yield f"{strategy} m={m} all, no FFNs, pre-LN", "mt", mt(
            "shared_transformer", tiny + test_model.sharing_flags(strategy, m, "all")
            + test_model.NO_FFN["both"] + test_model.PRE_LN)
    yield "cycle_rev 12 encoder layers over 6 sets, 1 decoder layer", "mt", mt(
        "shared_transformer", tiny + test_model.DEEP_SHARED_ENCODER)
    for share in (False, True):
        for self_p, cross_p, reuse in test_san.POLICIES:
            extra = test_san.CYCLE_REV if share else ()
            yield (f"SAN self {self_p} cross {cross_p} reuse {reuse}"
                   f"{' + cycle_rev' if share else ''}"), "mt", mt(
                "shared_transformer", tiny + test_san.san_flags(self_p, cross_p, reuse, extra))
    for strategy, m in test_lora.RELAXED_STRATEGIES:
        for scope in ("all", "attn", "ffn"):
            yield f"LoRA-relaxed {strategy} m={m} {scope}", "mt", mt(
                "shared_transformer", tiny + test_lora.flags(
                    strategy, m, scope, rank=2, biases=True, norms=scope == "all"),
                seed=3, relax=True)
    yield "LoRA-relaxed cycle_rev + SAN", "mt", mt(
        "shared_transformer", tiny + test_lora.flags(layers=3, rank=2, biases=True) + [
            "--san-self-policy", "1,2", "--san-cross-policy", "1,2"], seed=4, relax=True)
    yield "one wide FFN (iwslt_de_en)", "mt", mt(
        "transformer_one_wide_ffn_iwslt_de_en", test_one_wide_ffn.SMALL)
    for strategy, m in test_shared_lm.STRATEGIES:
        for scope in test_shared_lm.SCOPES:
            yield f"LM {strategy} m={m} {scope}", "lm", lm(
                helpers_lm.TINY_LM + helpers_lm.lm_sharing_flags(strategy, m, scope))


def tie_groups(model) -> list:
    """The names of each tensor that more than one name reaches, as sorted groups."""
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def incremental_vs_full(model, task, kind, device):
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    import helpers_lm
    import helpers_model

    if kind == "lm":
        tokens = helpers_lm.random_tokens(task).to(device)
        pad = task.source_dictionary.pad()
        with torch.no_grad():
            full, _ = model(tokens)
            state = {}
            steps = [model.decoder(tokens[:, :t + 1], incremental_state=state)[0]
                     for t in range(tokens.size(1))]
        keep = tokens.ne(pad)
    else:
        src, lengths, prev = (t.to(device) for t in helpers_model.random_batch(task))
        with torch.no_grad():
            full, _ = model(src, lengths, prev)
            enc = model.encoder(src, src_lengths=lengths)
            state = {}
            steps = [model.decoder(prev[:, :t + 1], encoder_out=enc, incremental_state=state)[0]
                     for t in range(prev.size(1))]
        keep = prev.ne(task.target_dictionary.pad())
    a = torch.log_softmax(torch.cat(steps, 1).float(), -1)[keep]
    b = torch.log_softmax(full.float(), -1)[keep]
    return (a - b).abs().max().item()


def stage_exactness(device: str, out: Path, s: dict) -> dict:
    import torch

    casts = {"float16": lambda m: m.half(), "bfloat16": lambda m: m.bfloat16()}
    rows, t0 = [], time.time()
    for name, kind, build in exactness_patterns(device):
        model, task = build()
        ties = tie_groups(model)
        row = {"pattern": name, "tied_groups": len(ties)}
        ref = copy.deepcopy(model).to(device)
        row["float32"] = incremental_vs_full(ref, task, kind, device)
        del ref
        for dtype, cast in casts.items():
            m = cast(copy.deepcopy(model).to(device))
            floats = {p.dtype for p in m.parameters() if p.is_floating_point()}
            row[f"{dtype}_ties_kept"] = tie_groups(m) == ties
            row[f"{dtype}_all_cast"] = floats == {getattr(torch, dtype)}
            row[dtype] = incremental_vs_full(m, task, kind, device)
            del m
        row["ok"] = (row["float32"] <= TOLERANCE["float32"]
                     and all(row[f"{d}_ties_kept"] and row[f"{d}_all_cast"]
                             and row[d] <= TOLERANCE[d] for d in casts))
        rows.append(row)
    return {"ok": all(r["ok"] for r in rows), "patterns": rows, "tolerance": TOLERANCE,
            "patterns_with_ties": sum(r["tied_groups"] > 0 for r in rows),
            "seconds": round(time.time() - t0, 1)}


# ---- decoding speed --------------------------------------------------------------------------
def load_checkpoint(path: str, device: str, half: bool):
    import fairseq_shared  # noqa: F401  (registers the architectures)
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path])
    model = models[0].eval().to(device)
    return (model.half() if half else model), task


def stage_decode(device: str, out: Path, s: dict) -> dict:
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    if not (out / "stages" / "train.json").exists():
        return {"ok": False, "error": "the train stage wrote no results"}
    train = json.loads((out / "stages" / "train.json").read_text())
    paths = {r["model"]: r["checkpoint"] for r in train["runs"]
             if r["mode"] == "fp16" and r["status"] == "ok"}
    names = ["vanilla", "san", "vanilla_half", "cycle_rev"]
    missing = [n for n in names if n not in paths]
    if missing:
        return {"ok": False, "error": f"no fp16 checkpoint of {missing} (train stage)"}
    half = device == "cuda"
    loaded = {n: load_checkpoint(paths[n], device, half) for n in names}
    task = loaded["vanilla"][1]
    task.load_dataset("test")
    ds = task.dataset("test")

    def batches(bsz):
        n = s["batch1_sentences"] if bsz == 1 else len(ds)
        return [ds.collater([ds[i] for i in range(k, min(k + bsz, n))]) for k in range(0, n, bsz)]

    def one_pass(model, task, bs):
        gen = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=40)
        tokens = sentences = 0
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            for b in bs:
                sample = {"net_input": {k: v.to(device) for k, v in b["net_input"].items()
                                        if k != "prev_output_tokens"}}
                hyps = gen.generate([model], sample)
                tokens += sum(len(h[0]["tokens"]) for h in hyps)
                sentences += len(hyps)
        if device == "cuda":
            torch.cuda.synchronize()
        return tokens, sentences, time.perf_counter() - t0

    result = {"precision": "float16" if half else "float32", "beam": 4, "repeats": s["repeats"],
              "test_sentences": len(ds)}
    t0 = time.time()
    for bsz in s["batches"]:
        bs = batches(bsz)
        for name in names:  # warm-up pass of each model
            one_pass(*loaded[name], bs)
        rates = {n: [] for n in names}
        lengths = {}
        for _ in range(s["repeats"]):  # interleaved: each round runs every model once
            for name in names:
                tokens, sentences, seconds = one_pass(*loaded[name], bs)
                rates[name].append(tokens / seconds)
                lengths[name] = tokens / sentences
        row = {n: {"tokens_per_s": round(statistics.median(r), 1),
                   "passes": [round(x, 1) for x in r], "mean_output_tokens": round(lengths[n], 2)}
               for n, r in rates.items()}
        speed = {n: row[n]["tokens_per_s"] for n in names}
        row["san_vs_vanilla"] = round(speed["san"] / speed["vanilla"], 3)
        row["cycle_rev_vs_vanilla_half"] = round(speed["cycle_rev"] / speed["vanilla_half"], 3)
        row["sentences"] = sum(b["nsentences"] for b in bs)
        result[f"batch_{bsz}"] = row
    result["seconds"] = round(time.time() - t0, 1)
    result["ok"] = all(v["tokens_per_s"] > 0 for b in s["batches"]
                       for k, v in result[f"batch_{b}"].items() if isinstance(v, dict))
    return result


# ---- tests -----------------------------------------------------------------------------------
def stage_tests(device: str, out: Path, s: dict, limit: float) -> dict:
    files = CORE_TESTS if device == "cuda" else REHEARSAL_TESTS
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider",
           "--rootdir", str(ROOT), *[str(ROOT / "tests" / t) for t in files]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit, env=env)
        log, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        log, rc = str(e.stdout or "") + "\ntimed out", 124
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "logs" / "pytest.log").write_text(log)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)",
                                               log.strip().splitlines()[-1] if log.strip() else "")}
    import torch

    return {"ok": rc == 0 and counts.get("passed", 0) > 0, "rc": rc, "files": list(CORE_TESTS),
            "counts": counts, "cuda_visible": torch.cuda.is_available(),
            "seconds": round(time.time() - t0, 1), "tail": log[-1500:] if rc else ""}


# ---- report ----------------------------------------------------------------------------------
def read_times(out: Path) -> list:
    path = out / "stages.tsv"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, status, rc, seconds, limit = line.split("\t")
        rows.append({"stage": name, "status": status, "rc": int(rc), "seconds": float(seconds),
                     "limit_s": float(limit)})
    return rows


def build_report(out: Path) -> dict:
    report = {"stages": read_times(out)}
    for name in STAGES[:-1]:
        path = out / "stages" / f"{name}.json"
        report[name] = json.loads(path.read_text()) if path.exists() else None
    report["ok"] = bool(report["stages"]) and all(
        r["status"] == "ok" for r in report["stages"] if r["stage"] != "report")
    report["total_seconds"] = round(sum(r["seconds"] for r in report["stages"]), 1)
    return report


def fmt(x, digits=3):
    return "-" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def render_markdown(report: dict) -> str:
    env = report.get("env") or {}
    lines = [f"# GPU check: {'PASS' if report['ok'] else 'FAIL'}", ""]
    device = env.get("gpu") or env.get("device", "?")
    lines += [f"Device: {device} (capability {env.get('capability', '-')}, "
              f"{env.get('gpu_memory_gib', '-')} GiB); Python {env.get('python', '?')}, torch "
              f"{env.get('torch', '?')}, CUDA {env.get('torch_cuda', '-')}, cuDNN "
              f"{env.get('cudnn', '-')}, fairseq {env.get('fairseq', '?')}, numpy "
              f"{env.get('numpy', '?')}; driver {env.get('nvidia_smi', '-')}. Mode: "
              f"{env.get('device', '?')}. Stand-ins (imported by fairseq, never called; "
              f"scripts/gpu_check_standins/README.md): {', '.join(env.get('standins') or []) or 'none'}.",
              ""]
    lines += ["| stage | status | seconds | limit (s) |", "|---|---|---:|---:|"]
    lines += [f"| {r['stage']} | {r['status']} | {r['seconds']:.1f} | {r['limit_s']:.0f} |"
              for r in report["stages"]]
    lines += [f"| total | | {report['total_seconds']:.1f} | |", ""]
    train = report.get("train")
    if train:
        lines += ["## Training", "", f"{train['updates']} updates each; {train['bf16_note']}.",
                  "", "| model | mode | status | loss first | loss last | updates | s |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for r in train["runs"]:
            lines.append(f"| {r['model']} | {r['mode']} | {r['status']} | "
                         f"{fmt(r.get('loss_first'))} | {fmt(r.get('loss_last'))} | "
                         f"{r.get('updates', 0)} | {r['seconds']} |")
        for r in train["runs"]:
            if r.get("error") and r["status"] != "ok":
                lines += ["", f"{r['model']} {r['mode']}: `{r['error'].strip().splitlines()[-1][:300]}`"]
        lines.append("")
    ex = report.get("exactness")
    if ex:
        tol = ex["tolerance"]
        lines += ["## Exactness in half precision", "",
                  f"max |incremental - full| of log-probabilities; tolerance float32 "
                  f"{tol['float32']}, float16 {tol['float16']}, bfloat16 {tol['bfloat16']}; "
                  f"'ties' = every tied tensor still one tensor after .half() / .bfloat16(). "
                  f"{ex['patterns_with_ties']} of {len(ex['patterns'])} patterns tie tensors.",
                  "", "| pattern | ok | float32 | float16 | ties | bfloat16 | ties |",
                  "|---|---|---:|---:|---|---:|---|"]
        for r in ex["patterns"]:
            lines.append(f"| {r['pattern']} | {'yes' if r['ok'] else 'NO'} | {r['float32']:.1e} | "
                         f"{r['float16']:.1e} | {r['float16_ties_kept']} | {r['bfloat16']:.1e} | "
                         f"{r['bfloat16_ties_kept']} |")
        lines.append("")
    dec = report.get("decode")
    if dec and dec.get("ok") is not None and "precision" in dec:
        lines += ["## Decoding speed", "", f"beam {dec['beam']}, {dec['precision']}, median of "
                  f"{dec['repeats']} interleaved passes (tokens/s of the best hypotheses)", "",
                  "| batch | sentences | vanilla | SAN | SAN/vanilla | vanilla half depth | "
                  "cycle_rev | cycle_rev/vanilla half |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for key in sorted(k for k in dec if k.startswith("batch_")):
            b = dec[key]
            lines.append(f"| {key[6:]} | {b['sentences']} | {b['vanilla']['tokens_per_s']} | "
                         f"{b['san']['tokens_per_s']} | {b['san_vs_vanilla']} | "
                         f"{b['vanilla_half']['tokens_per_s']} | {b['cycle_rev']['tokens_per_s']} | "
                         f"{b['cycle_rev_vs_vanilla_half']} |")
        lines.append("")
    tests = report.get("tests")
    if tests:
        lines += ["## Core tests", "", f"`pytest -m 'not slow'` over {', '.join(tests['files'])}, "
                  f"CUDA visible: {tests['cuda_visible']}: {tests['counts']} (rc {tests['rc']}).", ""]
    return "\n".join(lines)


def stage_report(out: Path) -> dict:
    report = build_report(out)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(render_markdown(report) + "\n")
    print(render_markdown(report))
    return {"ok": True}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fairseq-train-bf16"]:
        fairseq_train_bf16(argv[1:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("stage", choices=STAGES)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--out", required=True, type=Path, help="the check's output folder")
    p.add_argument("--limit", type=float, default=600, help="seconds this stage may take")
    args = p.parse_args(argv)
    out = args.out.resolve()
    s = SIZES[args.device]
    if args.stage == "report":
        stage_report(out)
        return 0
    torch_threads(args.device)
    result = {"env": lambda: stage_env(args.device, out, s),
              "train": lambda: stage_train(args.device, out, s, args.limit),
              "exactness": lambda: stage_exactness(args.device, out, s),
              "decode": lambda: stage_decode(args.device, out, s),
              "tests": lambda: stage_tests(args.device, out, s, args.limit - 5)}[args.stage]()
    write_stage(out, args.stage, result)
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, (list, dict))}))
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
