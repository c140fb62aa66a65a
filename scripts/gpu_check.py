#!/usr/bin/env python
"""The prepared GPU check (issue 23, item 5), one call: fp16 training, exactness, and CUDA
decoding speed of SAN against vanilla (Xiao et al.'s own setting: fp16 on a GPU).

    python scripts/gpu_check.py --work work/gpu_check --out results/gpu_check.json   # CUDA
    python scripts/gpu_check.py --cpu --work /tmp/gc --out /tmp/gc/gpu_check.json    # tiny, CPU

1. Training: vanilla, cycle_rev and SAN models on the synthetic toy corpus
   (``fairseq_shared.data.toydata``) with ``fairseq-train --fp16`` on CUDA (``--cpu``:
   ``--memory-efficient-fp16 --cpu`` at tiny sizes, what this project's machines can run);
   first and last training loss of each.
2. Exactness of the cycle_rev model in half precision on the device: tied layers stay one
   tensor after ``.half()``, and incremental decoding equals the full forward pass (max abs
   difference of the decoder's log-probs).
3. Decoding speed: SAN and vanilla in half precision on CUDA (float32 on the CPU), fairseq's
   beam search (beam 4) over the test set, one warm-up pass, then ``--repeats`` timed passes
   interleaved across the two models; tokens/s of each (median) and their ratio.

The project never depends on a GPU: the suite runs the ``--cpu`` mode
(``tests/test_half_precision.py``).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch

SIZES = {
    "cuda": dict(dim=512, ffn=2048, heads=8, enc=6, dec=6, updates=300, max_tokens=4096, bsz=64),
    "cpu": dict(dim=32, ffn=64, heads=2, enc=2, dec=4, updates=10, max_tokens=500, bsz=8),
}


def model_flags(name: str, s: dict) -> list:
    dims = ["--encoder-layers", s["enc"], "--decoder-layers", s["dec"],
            "--encoder-embed-dim", s["dim"], "--decoder-embed-dim", s["dim"],
            "--encoder-ffn-embed-dim", s["ffn"], "--decoder-ffn-embed-dim", s["ffn"],
            "--encoder-attention-heads", s["heads"], "--decoder-attention-heads", s["heads"],
            "--share-all-embeddings", "--dropout", "0"]
    blocks = ",".join(["2"] * (s["dec"] // 2))
    arch = {
        "vanilla": ["--arch", "transformer"],
        "cycle_rev": ["--arch", "transformer_cycle_rev", "--encoder-unique-layers",
                      s["enc"] // 2, "--decoder-unique-layers", s["dec"] // 2],
        "san": ["--arch", "transformer_san", "--san-self-policy", blocks,
                "--san-cross-policy", blocks],
    }[name]
    return [str(x) for x in arch + dims]


def train(name: str, data: str, work: str, device: str, s: dict) -> dict:
    from fairseq_shared.fairseq_commands import USER_DIR, fairseq_tool

    save_dir = os.path.join(work, name)
    precision = ["--fp16"] if device == "cuda" else ["--memory-efficient-fp16", "--cpu",
                                                     "--fp16-init-scale", "8"]
    cmd = fairseq_tool("train") + [
        data, "--user-dir", USER_DIR, *model_flags(name, s), *precision,
        "--optimizer", "adam", "--lr", "0.005" if device == "cpu" else "0.0007",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "1" if device == "cpu" else "50",
        "--max-tokens", str(s["max_tokens"]), "--max-update", str(s["updates"]), "--seed", "1",
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-save-optimizer-state",
        "--log-interval", "1", "--no-progress-bar", "--num-workers", "0",
    ]
    t0 = time.time()
    result = subprocess.run(cmd, capture_output=True, text=True)
    log = result.stdout + result.stderr
    if result.returncode:
        sys.exit(f"gpu_check: fairseq-train {name} failed:\n{log[-3000:]}")
    losses = [float(x) for x in re.findall(r"train_inner \|.* loss=([\d.]+)", log)]
    return {"checkpoint": os.path.join(save_dir, "checkpoint_last.pt"),
            "loss_first": losses[0], "loss_last": losses[-1], "updates": len(losses),
            "seconds": round(time.time() - t0, 1)}


def _load(path: str, device: str, half: bool):
    import fairseq_shared  # noqa: F401  (registers the architectures)
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path])
    model = models[0].eval().to(device)
    return (model.half() if half else model), task


def exactness(path: str, device: str) -> dict:
    model, task = _load(path, device, half=True)
    layers = model.decoder.layers
    tied = layers[-1].fc1.weight is layers[0].fc1.weight and layers[0].fc1.weight.dtype == torch.half
    task.load_dataset("test")
    ds = task.dataset("test")
    batch = ds.collater([ds[i] for i in range(4)])
    net = {k: v.to(device) for k, v in batch["net_input"].items()}
    with torch.no_grad():
        full = model(**net)[0]
        enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        state, steps = {}, []
        prev = net["prev_output_tokens"]
        for t in range(prev.size(1)):
            steps.append(model.decoder(prev[:, :t + 1], encoder_out=enc, incremental_state=state)[0])
    keep = prev.ne(task.target_dictionary.pad())
    a = torch.log_softmax(torch.cat(steps, 1).float(), -1)[keep]
    b = torch.log_softmax(full.float(), -1)[keep]
    return {"tied_one_tensor": bool(tied),
            "incremental_vs_full_max_abs_diff": (a - b).abs().max().item()}


def decode_speed(paths: dict, device: str, bsz: int, repeats: int) -> dict:
    from fairseq.sequence_generator import SequenceGenerator

    half = device == "cuda"
    loaded = {name: _load(path, device, half) for name, path in paths.items()}
    first_task = next(iter(loaded.values()))[1]
    first_task.load_dataset("test")
    ds = first_task.dataset("test")
    batches = [ds.collater([ds[i] for i in range(k, min(k + bsz, len(ds)))])
               for k in range(0, len(ds), bsz)]

    def one_pass(model, task):
        gen = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=50)
        tokens = 0
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            for b in batches:
                sample = {"net_input": {k: v.to(device) for k, v in b["net_input"].items()
                                        if k != "prev_output_tokens"}}
                tokens += sum(len(h[0]["tokens"]) for h in gen.generate([model], sample))
        if device == "cuda":
            torch.cuda.synchronize()
        return tokens, time.perf_counter() - t0

    for model, task in loaded.values():
        one_pass(model, task)  # warm-up
    rates = {name: [] for name in loaded}
    for _ in range(repeats):
        for name, (model, task) in loaded.items():
            tokens, seconds = one_pass(model, task)
            rates[name].append(tokens / seconds)
    out = {name: {"tokens_per_s": statistics.median(r), "passes": [round(x, 1) for x in r]}
           for name, r in rates.items()}
    out["san_vs_vanilla"] = out["san"]["tokens_per_s"] / out["vanilla"]["tokens_per_s"]
    out.update(precision="float16" if half else "float32", beam=4, batch_size=bsz,
               sentences=len(ds))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU (the test mode)")
    p.add_argument("--work", required=True, help="directory for the corpus and checkpoints")
    p.add_argument("--out", required=True, help="the JSON report")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device; pass --cpu for the tiny CPU mode")
    from fairseq_shared.data.toydata import build_toy_corpus

    s = SIZES[device]
    data = os.path.join(build_toy_corpus(os.path.join(args.work, "toy")), "bin")
    report = {"device": device, "torch": torch.__version__, "sizes": s,
              "precision": "fp16" if device == "cuda" else "memory-efficient-fp16",
              "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None}
    report["train"] = {name: train(name, data, args.work, device, s)
                       for name in ("vanilla", "cycle_rev", "san")}
    report["exactness"] = exactness(report["train"]["cycle_rev"]["checkpoint"], device)
    report["decode"] = decode_speed({n: report["train"][n]["checkpoint"] for n in ("san", "vanilla")},
                                    device, s["bsz"], args.repeats)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    t, d = report["train"], report["decode"]
    print("\n".join([
        f"gpu_check on {device} ({report['gpu'] or 'tiny sizes'}), {report['precision']} training:",
        *[f"  {n}: loss {r['loss_first']:.3f} -> {r['loss_last']:.3f} in {r['updates']} updates "
          f"({r['seconds']} s)" for n, r in t.items()],
        f"  exactness (cycle_rev, half): tied one tensor {report['exactness']['tied_one_tensor']}, "
        f"incremental vs full {report['exactness']['incremental_vs_full_max_abs_diff']:.2e}",
        f"  decoding ({d['precision']}, beam 4, batch {d['batch_size']}): SAN "
        f"{d['san']['tokens_per_s']:.0f} tok/s, vanilla {d['vanilla']['tokens_per_s']:.0f} tok/s, "
        f"x{d['san_vs_vanilla']:.2f}",
        f"report: {args.out}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
