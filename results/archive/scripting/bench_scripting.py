#!/usr/bin/env python
"""What TorchScript buys at decoding: fairseq's SequenceGenerator scripted against the
eager one, side by side in one process, for a vanilla and a SAN model.

    OMP_NUM_THREADS=1 python results/archive/scripting/bench_scripting.py --data work/bible/bin \\
        [--models vanilla=A.pt,san=B.pt] [--repeats 5] [--out results/archive/scripting/scripting.json]

Without ``--models`` it builds the two models itself, d = 256 (FFN 1024, 4 heads, 6+6
layers; SAN: transformer_san's paper policy) with random weights, i.e. trained for 0
updates, and says so in the output. Every cell decodes the same test sentences with beam 4
at batch 1, 16 and 64 to a forced length (``--length`` tokens, min = max, so that random
weights and real ones decode the same amount of work). Cells are interleaved: each repeat
runs every model x mode x batch once; the table shows medians of CPU time (this process,
one thread: robust to other jobs on the machine) and wall time, and the scripted/eager
ratio. The scripted and eager hypotheses are compared too.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

import fairseq_shared  # noqa: F401
from fairseq import checkpoint_utils, options, tasks
from fairseq.sequence_generator import SequenceGenerator

from fairseq_shared.timing import select_ids

D256 = [
    "--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
    "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--encoder-layers", "6", "--decoder-layers", "6", "--share-decoder-input-output-embed",
]
RANDOM = {"vanilla": ["--arch", "shared_transformer"], "san": ["--arch", "transformer_san"]}
BATCHES = (1, 16, 64)


def random_model(data: str, name: str, seed: int = 1):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [data, "--cpu", *RANDOM[name], *D256])
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    return task.build_model(args), task


def load_model(data: str, path: str):
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    return models[0], task


def batches(task, n: int, bsz: int):
    ds = task.dataset("test")
    ids = select_ids(len(ds), n).tolist()
    return [ds.collater([ds[i] for i in ids[k:k + bsz]]) for k in range(0, n, bsz)]


def decode(generator, samples):
    out = []
    with torch.no_grad():
        for sample in samples:
            out += generator.forward({"net_input": {
                "src_tokens": sample["net_input"]["src_tokens"],
                "src_lengths": sample["net_input"]["src_lengths"],
            }})
    return out


def timed(generator, samples):
    cpu, wall = time.process_time(), time.perf_counter()
    hyps = decode(generator, samples)
    return time.process_time() - cpu, time.perf_counter() - wall, hyps


def same_hypotheses(a, b) -> bool:
    return all(torch.equal(x["tokens"], y["tokens"]) for ha, hb in zip(a, b) for x, y in zip(ha, hb))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="fairseq data-bin with a test split")
    p.add_argument("--models", default=None, help="name=checkpoint,...; default: random d=256 vanilla and SAN")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--length", type=int, default=30, help="forced output length (tokens)")
    p.add_argument("--sentences", type=int, default=64, help="test sentences at batch 16/64 (16 at batch 1)")
    p.add_argument("--out", default="results/archive/scripting/scripting.json")
    a = p.parse_args(argv)
    torch.set_num_threads(1)

    if a.models:
        specs = dict(item.split("=", 1) for item in a.models.split(","))
        models = {name: load_model(a.data, path) for name, path in specs.items()}
        weights = "trained checkpoints: " + ", ".join(f"{k}={v}" for k, v in specs.items())
    else:
        models = {name: random_model(a.data, name) for name in RANDOM}
        weights = "random weights (0 updates), d=256, FFN 1024, 4 heads, 6+6 layers"
    generators, samples = {}, {}
    for name, (model, task) in models.items():
        model.eval()
        task.load_dataset("test")
        eager = SequenceGenerator([model], task.target_dictionary, beam_size=a.beam,
                                  max_len_a=0, max_len_b=a.length, min_len=a.length)
        compile_s = time.perf_counter()
        scripted = torch.jit.script(eager)
        compile_s = time.perf_counter() - compile_s
        generators[name] = {"eager": eager, "scripted": scripted, "compile_s": compile_s}
        for bsz in BATCHES:
            samples[(name, bsz)] = batches(task, 16 if bsz == 1 else a.sentences, bsz)

    cells = {(n, m, b): {"cpu": [], "wall": []} for n in generators for m in ("eager", "scripted") for b in BATCHES}
    agree = {}
    for name in generators:  # warm-up (TorchScript's profiling executor optimises on the first runs)
        for mode in ("eager", "scripted"):
            for _ in range(2):
                decode(generators[name][mode], samples[(name, 16)][:1])
    for r in range(a.repeats):
        for name in generators:
            for bsz in BATCHES:
                hyps = {}
                for mode in ("eager", "scripted") if r % 2 == 0 else ("scripted", "eager"):
                    cpu, wall, hyps[mode] = timed(generators[name][mode], samples[(name, bsz)])
                    cells[(name, mode, bsz)]["cpu"].append(cpu)
                    cells[(name, mode, bsz)]["wall"].append(wall)
                agree[(name, bsz)] = same_hypotheses(hyps["eager"], hyps["scripted"])
        print(f"repeat {r + 1}/{a.repeats} done", flush=True)

    rows = []
    for name in generators:
        for bsz in BATCHES:
            n = len(sum((s["id"].tolist() for s in samples[(name, bsz)]), []))
            e, s = cells[(name, "eager", bsz)], cells[(name, "scripted", bsz)]
            med = {k: {m: statistics.median(c[k]) for m, c in (("eager", e), ("scripted", s))} for k in ("cpu", "wall")}
            rows.append({
                "model": name, "batch": bsz, "sentences": n,
                "eager_cpu_ms_per_sentence": 1000 * med["cpu"]["eager"] / n,
                "scripted_cpu_ms_per_sentence": 1000 * med["cpu"]["scripted"] / n,
                "scripted_over_eager_cpu": med["cpu"]["scripted"] / med["cpu"]["eager"],
                "eager_wall_ms_per_sentence": 1000 * med["wall"]["eager"] / n,
                "scripted_wall_ms_per_sentence": 1000 * med["wall"]["scripted"] / n,
                "scripted_over_eager_wall": med["wall"]["scripted"] / med["wall"]["eager"],
                "same_hypotheses": agree[(name, bsz)],
                "raw": {"eager": e, "scripted": s},
            })
    record = {
        "command": "OMP_NUM_THREADS=1 python results/archive/scripting/bench_scripting.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "weights": weights, "beam": a.beam, "forced_length": a.length, "repeats": a.repeats,
        "threads": torch.get_num_threads(), "torch": str(torch.__version__),
        "compile_s": {n: g["compile_s"] for n, g in generators.items()}, "rows": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)
    print(render(record))


def render(record) -> str:
    lines = [
        f"Weights: {record['weights']}. Beam {record['beam']}, forced length {record['forced_length']}, "
        f"{record['repeats']} interleaved repeats (median), {record['threads']} thread, torch {record['torch']}.",
        "",
        "| model | batch | sentences | eager CPU ms/sent | scripted CPU ms/sent | scripted/eager CPU "
        "| eager wall ms/sent | scripted wall ms/sent | scripted/eager wall | same hypotheses |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in record["rows"]:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['sentences']} | {r['eager_cpu_ms_per_sentence']:.1f} | "
            f"{r['scripted_cpu_ms_per_sentence']:.1f} | x{r['scripted_over_eager_cpu']:.2f} | "
            f"{r['eager_wall_ms_per_sentence']:.1f} | {r['scripted_wall_ms_per_sentence']:.1f} | "
            f"x{r['scripted_over_eager_wall']:.2f} | {'yes' if r['same_hypotheses'] else 'no'} |"
        )
    compile_s = ", ".join(f"{k} {v:.1f} s" for k, v in record["compile_s"].items())
    lines += ["", f"torch.jit.script of the generator took {compile_s}."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
