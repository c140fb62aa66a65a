"""The speed / size / quality frontier of trained models (issue 19, item 3).

    python -m harness.frontier --data work/bible_clean --out results/frontier \\
        --checkpoints vanilla=ckpt/v/checkpoint_last.pt,cycle_rev=ckpt/c/checkpoint_last.pt \\
        [--batch-sizes 1,32] [--beam 4] [--threads 1] [--repeats 2] [--anchor vanilla] [--commit]

Each model is decoded on the whole test set (``--sentences N``: N evenly spaced) by eager
fairseq, TorchScript and CTranslate2 float32/int8 (SAN and anything else that does not export:
recorded as not exportable, with the reason), at each batch size. One JSON per model
(``<out>/models/<name>.json``, hypotheses in ``<out>/hyp/``) is written, and with ``--commit``
git-committed, the moment the model is done; a model whose record exists with the same settings,
measured in this machine boot, is skipped (one from another boot is measured again, since speeds
compare only within one boot). Then ``frontier.md`` (the table and "which to pick"),
``pick.json`` and ``frontier_bleu_vs_speed.png`` / ``frontier_bleu_vs_mb.png`` are rendered from
the records only (``--render-only`` does just that). See
:mod:`harness.frontier_engines`.
"""

import argparse
import logging
import os
import sys
from pathlib import Path

from fairseq_shared.cli.arg_types import non_negative_int, positive_int, positive_int_list
from harness.frontier_engines import ENGINES


def _engines(text):
    engines = [e.strip() for e in text.split(",") if e.strip()]
    bad = [e for e in engines if e not in ENGINES]
    if bad or "fairseq" not in engines:
        raise argparse.ArgumentTypeError(
            f"--engines: '{text}': allowed {', '.join(ENGINES)}, fairseq always included")
    return engines


def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoints", default="", help="NAME=PATH,NAME=PATH,... (the models)")
    p.add_argument("--data", help="prepared corpus root (bin/, raw/, spm.model)")
    p.add_argument("--out", required=True, help="results directory (models/, hyp/, tables)")
    p.add_argument("--work", default=os.path.join("work", "frontier"),
                   help="exports and weight files, not committed (default work/frontier)")
    p.add_argument("--batch-sizes", type=positive_int_list, default=[1, 32])
    p.add_argument("--engines", type=_engines, default=",".join(ENGINES),
                   help="engines to measure (default all; fairseq is the reference)")
    p.add_argument("--beam", type=positive_int, default=4)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--warmup", type=non_negative_int, default=1, help="untimed passes per engine")
    p.add_argument("--warmup-batches", type=int, default=None,
                   help="a warm-up pass decodes only the N longest batches (default: all)")
    p.add_argument("--repeats", type=positive_int, default=2, help="timed passes per engine")
    p.add_argument("--sentences", type=int, default=0, help="evenly spaced sentences; 0: all")
    p.add_argument("--gen-subset", dest="subset", default="test")
    p.add_argument("--verify-sentences", type=int, default=100,
                   help="sentences the export's own verification decodes (0: skip)")
    p.add_argument("--commit", action="store_true",
                   help="git-commit each model's record the moment it is written")
    p.add_argument("--redo", action="store_true", help="measure models that have a record")
    p.add_argument("--anchor", default="vanilla",
                   help="the model whose eager fairseq speed the table's ratios divide by "
                        "(default vanilla); ratios only within one machine boot")
    p.add_argument("--render-only", action="store_true",
                   help="only render the table, plots and pick from <out>/models/*.json")
    return p


def main(argv=None) -> int:
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "WARNING").upper())
    args = build_parser().parse_args(argv)
    from harness import frontier_engines, frontier_report
    from harness.queue import commit, read_json, results_repository
    from fairseq_shared.timing.machine import boot_key, describe

    repo = results_repository(args.out) if args.commit and not args.render_only else None
    if not args.render_only:
        if not args.data:
            print("ERROR: --data is required (a prepared corpus root)", file=sys.stderr)
            return 2
        try:
            checkpoints = frontier_engines.parse_checkpoints(args.checkpoints)
        except ValueError as e:
            print(f"ERROR: {e}", file=sys.stderr)
            return 2
        if args.warmup_batches is not None and args.warmup_batches < 1:
            print(f"ERROR: --warmup-batches {args.warmup_batches}: allowed an integer >= 1 "
                  "(or leave it out: warm up on every batch)", file=sys.stderr)
            return 2
        settings = {k: getattr(args, k) for k in frontier_engines.SETTINGS}
        here = boot_key(describe())
        for name, path in checkpoints.items():
            old = read_json(Path(frontier_engines.record_path(args.out, name)), strict=True)
            if old and old.get("settings") == settings and not args.redo:
                if boot_key(old.get("machine")) == here:
                    print(f"[frontier] {name}: recorded with these settings; skipped",
                          file=sys.stderr)
                    continue
                # speeds compare only within one boot: a stopped frontier resumed on
                # another machine measures its models again rather than mixing boots
                print(f"[frontier] {name}: recorded in another machine boot; measured again",
                      file=sys.stderr)
            record = frontier_engines.measure_model(
                name, path, args.data, args.work, settings,
                progress=lambda m: print(m, file=sys.stderr, flush=True))
            paths = frontier_engines.write_record(args.out, record)
            print(f"[frontier] {name}: wrote {paths[0]}", file=sys.stderr)
            if repo:
                ok = commit(paths, f"frontier: {name} measured", repo)
                print(f"[frontier] {'committed' if ok else 'could not commit'} {name}",
                      file=sys.stderr)
    paths = frontier_report.render(args.out, args.anchor)
    if repo:
        commit(list(paths.values()), "frontier: table, plots and pick rendered", repo)
    with open(paths["md"], encoding="utf-8") as f:
        print(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
