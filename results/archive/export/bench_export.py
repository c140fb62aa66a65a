"""Deployment table: fairseq vs CTranslate2 (float32, int8) for trained checkpoints.

    python results/archive/export/bench_export.py CKPT_A [CKPT_B ...] --data DATA --out results/archive/export/export.md \
        [--sentences 0] [--repeats 3] [--batch-sizes 1,32] [--threads 1] [--beam 4] \
        [--max-len-a 1.2] [--max-len-b 10]

Each checkpoint is exported (``fairseq_shared.export``: plain fairseq transformer + CTranslate2
float32, verified on real sentences, + int8) into ``--work``. Then, in this one process,
every engine of every checkpoint decodes the same test sentences with the same batches (fairseq's
own batching, from ``fairseq_shared.timing.Session``) at each batch size, in interleaved timed
passes (pass r runs every engine once, in a rotating order, before pass r + 1). Speed is output
tokens (EOS included) per second of the process's CPU time in the decoding calls (one thread:
other jobs on the machine hardly move it), median over passes, with the wall-clock rate beside
it; "vs fairseq" is the median (min-max) over passes of the per-pass CPU ratio to fairseq on
the same checkpoint. The output length limit is fairseq's ``max_len_a * source length +
max_len_b`` (defaults 1.2 and 10, the harness's decode settings; fairseq-generate's own
defaults 0 and 200 let a sentence whose beams never all end run 200 decoder steps, and hold its
whole batch that long). The fairseq rows also report decoder steps per pass and CPU ms per
step (``fairseq_shared.timing.trace``). BLEU/chrF are sacreBLEU on
the detokenized hypotheses of the batch-1 pass (``fairseq_shared.scoring.score``), detokenized
as fairseq-generate does. Size on disk: the deployable file (fairseq: the exported
``checkpoint.pt``; CTranslate2: ``model.bin``). Resident memory: measured in a fresh process
per engine (RSS after loading the model and translating 8 sentences, minus the RSS after the
imports; and that process's peak RSS).
"""

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
from typing import Dict

from fairseq_shared.timing.ct2_engine import CT2Engine, detokenize

ENGINES = ("fairseq", "ct2_float32", "ct2_int8")


def _name(path: str) -> str:
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return parent or os.path.splitext(os.path.basename(path))[0]


def measure_rss(engine: str, path: str, data: str, threads: int, beam: int) -> Dict:
    """Run in a fresh process (``--_rss``): RSS of one engine holding one model."""
    import ctranslate2  # noqa: F401  (imported before the baseline, for every engine)

    from fairseq_shared.timing import Session, rss_bytes, select_ids

    session = Session(data, path if engine == "fairseq" else args_checkpoint(path),
                      ["--beam", str(beam), "--batch-size", "1", "--cpu"], subset=8,
                      threads=threads)
    cfg = session.cfg
    session.task.load_dataset(cfg.dataset.gen_subset)  # as Session.load does, without a model
    session.dataset = session.task.dataset(cfg.dataset.gen_subset)
    session.ids = select_ids(len(session.dataset), session.subset)
    session._dataset_loaded = True
    base = rss_bytes()
    if engine == "fairseq":
        runner = session.load("m", path)
    else:
        runner = CT2Engine(session, path, "int8" if engine == "ct2_int8" else "default", threads)
    runner.run_pass()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"rss_model_mb": (rss_bytes() - base) / 2**20, "peak_rss_mb": peak / 2**20}


def args_checkpoint(ct2_dir: str) -> str:
    """The exported plain checkpoint beside a CTranslate2 directory."""
    return os.path.join(os.path.dirname(os.path.abspath(ct2_dir)), "checkpoint.pt")


def rss_in_subprocess(engine, path, data, threads, beam) -> Dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_rss", engine, path, "--data", data,
           "--threads", str(threads), "--beam", str(beam), "--out", os.devnull]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def median(xs):
    import statistics

    return statistics.median(xs) if xs else float("nan")


def bench(args) -> Dict:
    import torch

    from fairseq_shared.export.api import export
    from fairseq_shared.scoring import score
    from fairseq_shared.timing import Session, resolve_data

    torch.set_num_threads(args.threads)
    bin_dir, _ = resolve_data(args.data)
    models = {}
    for path in args.checkpoints:
        name = _name(path)
        if name in models:  # two checkpoints of one directory
            name = f"{name}/{os.path.splitext(os.path.basename(path))[0]}"
        out = os.path.join(args.work, name)
        report = export(path, out, ct2=True, quantization="int8", data=bin_dir,
                        sentences=args.verify_sentences, beam=args.beam, lenpen=args.lenpen,
                        max_len_a=args.max_len_a, max_len_b=args.max_len_b)
        if not report["ok"]:
            from fairseq_shared.export.api import summary

            raise SystemExit(f"{path}: export verification failed:\n{summary(report)}")
        models[name] = {"checkpoint": path, "export": report}
    sessions = {}
    engines = []  # (batch size, model, engine, runner)
    for bs in args.batch_sizes:
        first = next(iter(models.values()))["checkpoint"]
        session = Session(args.data, first, ["--beam", str(args.beam), "--lenpen",
                          str(args.lenpen), "--batch-size", str(bs), "--cpu",
                          "--max-len-a", str(args.max_len_a), "--max-len-b", str(args.max_len_b)],
                          subset=args.sentences or None, threads=args.threads)
        sessions[bs] = session
        for name, m in models.items():
            engines.append((bs, name, "fairseq", session.load(name, m["checkpoint"])))
        for name, m in models.items():
            export_dir = os.path.dirname(m["export"]["plain_checkpoint"])
            for engine, sub, ctype in (("ct2_float32", "ct2", "default"),
                                       ("ct2_int8", "ct2_int8", "int8")):
                runner = CT2Engine(session, os.path.join(export_dir, sub), ctype, args.threads)
                engines.append((bs, name, engine, runner))
    passes = {(bs, n, e): [] for bs, n, e, _ in engines}
    outputs = {}
    for r in range(args.warmup + args.repeats):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for bs, name, engine, runner in order:
            torch.set_num_threads(args.threads)  # every pass, whatever ran before it
            result, out = runner.run_pass()
            outputs[(bs, name, engine)] = out
            if r >= args.warmup:
                passes[(bs, name, engine)].append(result)
            print(f"[bench] pass {r + 1}/{args.warmup + args.repeats} batch {bs} {name} "
                  f"{engine}: {result.cpu_tokens_per_s:.1f} CPU tok/s, "
                  f"{result.tokens_per_s:.1f} wall tok/s", flush=True)
    rows = []
    bleu_bs = min(args.batch_sizes)
    refs, ref_source = sessions[bleu_bs].references()
    for name, m in models.items():
        export_dir = os.path.dirname(m["export"]["plain_checkpoint"])
        files = {"fairseq": m["export"]["plain_checkpoint"],
                 "ct2_float32": os.path.join(export_dir, "ct2", "model.bin"),
                 "ct2_int8": os.path.join(export_dir, "ct2_int8", "model.bin")}
        for engine in ENGINES:
            s = score(detokenize(sessions[bleu_bs], outputs[(bleu_bs, name, engine)]), refs)
            row = {"model": name, "engine": engine, "bleu": s["bleu"],
                   "chrf": s["chrf"], "bleu_signature": s["bleu_signature"],
                   "disk_bytes": os.path.getsize(files[engine])}
            for bs in args.batch_sizes:
                mine = passes[(bs, name, engine)]
                base = passes[(bs, name, "fairseq")]
                ratios = [p.cpu_tokens_per_s / q.cpu_tokens_per_s for p, q in zip(mine, base)]
                row[f"tok_s_b{bs}"] = median([p.cpu_tokens_per_s for p in mine])
                row[f"wall_tok_s_b{bs}"] = median([p.tokens_per_s for p in mine])
                row[f"vs_fairseq_b{bs}"] = median(ratios)
                row[f"vs_fairseq_b{bs}_range"] = [min(ratios), max(ratios)]
                row[f"cpu_s_b{bs}"] = [p.cpu_seconds for p in mine]
                row[f"tokens_b{bs}"] = mine[-1].tokens
                if mine[-1].trace:  # fairseq's eager generator: steps from the decode trace
                    row[f"steps_b{bs}"] = mine[-1].trace["steps"]
                    row[f"hit_max_b{bs}"] = mine[-1].trace["hit_max"]
                    row[f"cpu_ms_per_step_b{bs}"] = median([p.cpu_ms_per_step for p in mine])
            path = m["checkpoint"] if engine == "fairseq" else os.path.dirname(files[engine])
            if not args.no_rss:
                row.update(rss_in_subprocess(engine, path, args.data, args.threads, args.beam))
            rows.append(row)
    settings = sessions[bleu_bs].settings()
    return {"rows": rows, "settings": settings, "references": ref_source,
            "verify": {n: m["export"]["verify"] for n, m in models.items()},
            "sharing": {n: m["export"]["sharing"] for n, m in models.items()}}


def markdown(result: Dict, args, command: str) -> str:
    import ctranslate2

    s = result["settings"]
    bss = args.batch_sizes
    lines = [
        "# Deployment: fairseq vs CTranslate2", "",
        f"Command: `{command}`", "",
        f"{s['sentences_decoded']} sentences of `{s['gen_subset']}` ({s['subset']}), beam "
        f"{args.beam}, lenpen {args.lenpen}, max length {args.max_len_a} x source + "
        f"{args.max_len_b}, {args.threads} thread(s), batch sizes "
        f"{', '.join(map(str, bss))}; {args.repeats} timed passes per engine after "
        f"{args.warmup} warm-up, interleaved in one process. CPU: {s['cpu_model']} "
        f"({s['cpu_count']} cores); torch {s['torch']}, fairseq {s['fairseq']}, CTranslate2 "
        f"{ctranslate2.__version__}, sacreBLEU {s['sacrebleu']}. References: "
        f"{result['references']}. BLEU/chrF from the batch-{min(bss)} pass. tok/s: output "
        f"tokens per CPU second (median over passes; wall-clock in brackets); vs fairseq: "
        f"median (min-max) of the per-pass CPU ratio; steps: fairseq's decoder steps per pass "
        f"(outputs at the length limit), CPU ms per step.", "",
        "| model | engine | BLEU | chrF | " + " | ".join(
            f"tok/s b={b} | vs fairseq b={b} | steps b={b} | ms/step b={b}" for b in bss)
        + " | disk MB | RSS MB | peak RSS MB |",
        "|---|---|---|---|" + "---|---|---|---|" * len(bss) + "---|---|---|",
    ]

    def steps(r, b):
        if f"steps_b{b}" not in r:
            return "- | -"
        return (f"{r[f'steps_b{b}']} ({r[f'hit_max_b{b}']} at limit) | "
                f"{r[f'cpu_ms_per_step_b{b}']:.2f}")

    for r in result["rows"]:
        speed = " | ".join(
            f"{r[f'tok_s_b{b}']:.1f} ({r[f'wall_tok_s_b{b}']:.1f}) | x{r[f'vs_fairseq_b{b}']:.2f} "
            f"({r[f'vs_fairseq_b{b}_range'][0]:.2f}-{r[f'vs_fairseq_b{b}_range'][1]:.2f}) | "
            f"{steps(r, b)}" for b in bss)
        rss = (f"{r['rss_model_mb']:.1f} | {r['peak_rss_mb']:.0f}" if "rss_model_mb" in r
               else "n/a | n/a")
        lines.append(f"| {r['model']} | {r['engine']} | {r['bleu']:.2f} | {r['chrf']:.2f} | "
                     f"{speed} | {r['disk_bytes'] / 2**20:.2f} | {rss} |")
    lines += ["", "Sharing and export verification (hypotheses on the export's sample):", ""]
    for name, sharing in result["sharing"].items():
        checks = "; ".join(
            f"{k}: {v['identical']}/{v['sentences']} identical, {v['ties']} ties"
            for k, v in result["verify"][name].items() if isinstance(v, dict) and "identical" in v)
        lines.append(f"- {name}: encoder {sharing['encoder']}; decoder {sharing['decoder']}. "
                     f"{checks}")
    lines += ["", f"BLEU signature: `{result['rows'][0]['bleu_signature']}`", ""]
    return "\n".join(lines)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--data", required=True, help="corpus root (bin/, raw/, spm.model) or bin dir")
    p.add_argument("--out", required=True, help="markdown file to write (JSON beside it)")
    p.add_argument("--work", default="work/export_bench", help="where the exports go")
    p.add_argument("--sentences", type=int, default=0, help="evenly spaced test sentences; 0: all")
    p.add_argument("--verify-sentences", type=int, default=100)
    p.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=1.2,
                   help="output limit max_len_a * source length + max_len_b (default 1.2, as "
                   "the harness decodes; fairseq-generate's default is 0)")
    p.add_argument("--max-len-b", type=int, default=10,
                   help="see --max-len-a (default 10; fairseq-generate's default is 200)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-rss", action="store_true", help="skip the per-engine memory processes")
    p.add_argument("--_rss", nargs=1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args._rss:
        print(json.dumps(measure_rss(args._rss[0], args.checkpoints[0], args.data,
                                     args.threads, args.beam)))
        return 0
    command = "python results/archive/export/bench_export.py " + " ".join(shlex.quote(a) for a in argv)
    result = bench(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(markdown(result, args, command))
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump({"command": command, **result}, f, indent=1, default=str)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
