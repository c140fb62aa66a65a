"""The main job (``make demo``): Bible es->en, a vanilla and a parameter-shared model of the
same size, decoded with timing, one table.

    .venv/bin/python -m fairseq_shared.cli.main_job [--updates 300] [--threads 2] ...

Stages, each restartable (re-running skips what is done and valid; a killed training resumes
from fairseq's ``checkpoint_last.pt``):

1. setup    check the environment (torch, fairseq, this package) and print the budget;
2. corpus   ``python -m fairseq_shared.data.bible --out <work>/bible`` (its own stages skip
            what is done and valid), or ``--data`` a prepared corpus;
3. train    vanilla (L+L layers) and cycle_rev (2L+2L layers over L parameter sets per stack:
            the same parameter count), via :mod:`fairseq_shared.cli.reproduce`;
4. decode   both models with fairseq's generator, interleaved timed passes (:mod:`timing`);
5. table    parameters, BLEU, chrF, decoding tokens/s (+ what was decoded), also written to
            ``<work>/main_job/main_job.md``.

Budgets come from flags or environment variables (flag wins): ``FS_BUDGET`` (preset, default
``demo``), ``FS_DIM`` (model width, 256), ``FS_LAYERS`` (L, 3), ``FS_UPDATES`` (200),
``FS_MINUTES`` (cap per model in minutes, 15), ``FS_THREADS`` (training threads, 2), ``FS_DECODE_THREADS`` (1), ``FS_MAX_TOKENS`` (4096),
``FS_DECODE_SENTENCES`` (test verses decoded, evenly spaced; 200; 0 = all), ``FS_REPEATS``
(timed passes, 2), ``FS_WORK`` (work directory, ``work``). The defaults aim at about 30
minutes on 2 CPU cores.
"""

import argparse
import os
import subprocess
import sys
import time

ENV = {  # flag -> (environment variable, budget key, type)
    "dim": ("FS_DIM", "dim", int),
    "layers": ("FS_LAYERS", "L", int),
    "updates": ("FS_UPDATES", "max_update", int),
    "minutes": ("FS_MINUTES", "max_minutes", float),
    "threads": ("FS_THREADS", "threads", int),
    "max_tokens": ("FS_MAX_TOKENS", "max_tokens", int),
    "decode_sentences": ("FS_DECODE_SENTENCES", "subset", int),
    "repeats": ("FS_REPEATS", "repeats", int),
    "decode_threads": ("FS_DECODE_THREADS", "decode_threads", int),
}
CONFIG_NAMES = ("vanilla", "cycle_rev_2L")


def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", default=os.environ.get("FS_BUDGET", "demo"),
                   help="reproduce.py budget preset the values below start from (default demo)")
    p.add_argument("--work", default=os.environ.get("FS_WORK", "work"),
                   help="work directory (corpus in <work>/bible, runs in <work>/main_job)")
    p.add_argument("--data", default=None,
                   help="use this prepared corpus (bin/, raw/, spm.model) instead of building "
                   "the Bible corpus")
    for flag, (env, key, typ) in ENV.items():
        p.add_argument(f"--{flag.replace('_', '-')}", type=typ, default=None,
                       help=f"budget '{key}' (env {env})")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    return p


def make_budget(args):
    from fairseq_shared.cli.reproduce import load_budget

    budget = load_budget(args.budget)
    for flag, (env, key, typ) in ENV.items():
        value = getattr(args, flag)
        if value is None and os.environ.get(env, "") != "":
            value = typ(os.environ[env])
        if value is not None:
            budget[key] = value
    if budget.get("subset") == 0:
        budget["subset"] = None
    budget["ffn"] = 4 * budget["dim"] if (args.dim or os.environ.get("FS_DIM")) else budget["ffn"]
    return budget


def corpus_ready(root: str) -> bool:
    bin_dir = os.path.join(root, "bin")
    need = [os.path.join(root, "spm.model"), os.path.join(root, "raw", "test.en"),
            os.path.join(bin_dir, "dict.es.txt"), os.path.join(bin_dir, "test.es-en.en.bin"),
            os.path.join(bin_dir, "train.es-en.es.bin")]
    return all(os.path.exists(p) for p in need)


def stage(k, name, t0):
    print(f"\n=== stage {k}/5: {name} (elapsed {(time.time() - t0) / 60:.1f} min) ===", flush=True)


def main(argv=None):
    t0 = time.time()
    args = build_parser().parse_args(argv)
    from fairseq_shared.cli.reproduce import _terminate_on_sigterm

    _terminate_on_sigterm()
    stage(1, "setup", t0)
    import torch

    import fairseq
    import fairseq_shared
    from fairseq_shared.cli import reproduce

    budget = make_budget(args)
    os.environ.setdefault("OMP_NUM_THREADS", str(budget["threads"]))
    torch.set_num_threads(int(budget["threads"]))
    print(f"torch {torch.__version__}, fairseq {fairseq.__version__}, fairseq_shared "
          f"{fairseq_shared.__version__}, {os.cpu_count()} CPUs, using {budget['threads']} threads",
          flush=True)
    print("budget: " + ", ".join(f"{k}={v}" for k, v in budget.items()), flush=True)

    stage(2, "corpus", t0)
    data = args.data or os.path.join(args.work, "bible")
    cmd = [sys.executable, "-m", "fairseq_shared.data.bible", "--out", data]
    if args.data:
        if not corpus_ready(data):
            raise SystemExit(f"--data {data}: not a prepared corpus (needs bin/, raw/, spm.model)")
        print(f"using the prepared corpus {data}", flush=True)
    elif args.dry_run:
        state = "present" if corpus_ready(data) else "missing"
        print(f"corpus {state}; would run (its stages skip what is done): {' '.join(cmd)}",
              flush=True)
    else:
        # the corpus builder checks each of its stages (parameters and outputs) and skips
        # the ones that are done, so it is always run
        print("running: " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        if not corpus_ready(data):
            raise SystemExit(f"corpus preparation finished but {data} is incomplete")

    out = os.path.join(args.work, "main_job")
    configs = reproduce.select_configs(reproduce.CONFIGS, ",".join(CONFIG_NAMES), None)
    if args.dry_run:
        if corpus_ready(data):
            reproduce.reproduce(data, out, budget, configs, dry_run=True)
        print("dry run: nothing trained", flush=True)
        return 0
    stage(3, "train (vanilla, then cycle_rev) and 4: decode", t0)
    result = reproduce.reproduce(data, out, budget, configs)

    stage(5, "table", t0)
    table = render(result, budget)
    print(table, flush=True)
    with open(os.path.join(out, "main_job.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(f"total {(time.time() - t0) / 60:.1f} min; details in {out}/tables.md", flush=True)
    return 0


def render(result, budget) -> str:
    decode = result.get("decode") or {}
    s = decode.get("settings", {})
    lines = [
        "| model | layers (enc+dec) | parameter sets per stack | parameters | updates | BLEU | "
        "chrF | decoding tokens/s | vs vanilla |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    from fairseq_shared.cli.reproduce import lookup_lines

    lookup = result.get("lookup")
    lines += lookup_lines(lookup, 9, 5)
    for r in result["rows"]:
        def f(x, spec):
            return "-" if x is None else format(x, spec)

        lines.append(
            f"| {r['name']} | {r['N']}+{r['N']} | {r['M']} | {f(r['params'], ',')} | "
            f"{f(r['updates'], 'd')} | {f(r['bleu'], '.2f')} | {f(r['chrf'], '.2f')} | "
            f"{f(r['decode_tokens_per_s'], '.1f')} | x{f(r['decode_speed_vs_vanilla'], '.2f')} |")
    lines += [
        "",
        f"Decoded: `{s.get('gen_subset')}` set, {s.get('subset')}; beam {s.get('beam')}, lenpen "
        f"{s.get('lenpen')}, batch {s.get('batch_size')}, {s.get('device')} with "
        f"{s.get('torch_threads')} threads; tokens/s = median of {s.get('timed_passes')} "
        f"interleaved timed passes after warm-up (fairseq's generator).",
        f"BLEU `{decode.get('bleu_signature')}`, chrF `{decode.get('chrf_signature')}`, "
        f"against {s.get('references')}.",
        "Lookup baseline: no model, the English of the training verse whose Spanish is "
        "closest (the corpus audit, `python -m fairseq_shared.data.audit`), on the same "
        "verses; a model is worth what it scores above it." if lookup else
        "No lookup baseline: the corpus has no audit (`python -m fairseq_shared.data.audit "
        "RAW_DIR`).",
        f"Budget `{budget['name']}`: d={budget['dim']}, FFN {budget['ffn']}, L={budget['L']}, "
        f"max {budget['max_update']} updates (cap {budget['max_minutes']} min per model), "
        f"max tokens {budget['max_tokens']}, {budget['threads']} training threads.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
