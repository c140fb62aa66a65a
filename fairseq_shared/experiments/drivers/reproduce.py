"""Reproduce the papers' tables on a prepared corpus: train, decode, tabulate, plot.

    python -m fairseq_shared.cli.reproduce --data work/bible --out results/bible --budget small
    python -m fairseq_shared.cli.reproduce --data work/bible --out results/bible --budget small --dry-run

One run trains every configuration (``fairseq-train --user-dir fairseq_shared`` in a
subprocess), decodes all of them in one interleaved timing run
(:func:`fairseq_shared.timing.benchmark`, fairseq's own generator, sacreBLEU on the raw
references) and writes into ``--out``:

* ``tables.md``: Takase & Kiyono's table (vanilla, universal, sequence/cycle/cycle_rev at
  N=2M and N=3M: M, N, parameters, training speed relative to vanilla, BLEU, chrF), the
  ALBERT-style ablation for MT (nothing / attention only / FFN only / all shared, and grouped
  sharing), Xiao et al.'s table (baseline vs SAN and SAN with parameter sharing: BLEU and
  decoding speed) and one row per configuration with everything measured;
* ``results.json`` / ``results.csv`` (all numbers and the budget), ``decode/`` (the timing
  report, hypotheses), ``bleu_vs_params.png``, ``bleu_vs_speed.png``;
* ``runs/<config>/`` (or ``--runs DIR``): checkpoints, ``train.log``, ``plan.json``,
  ``done.json``.

Configurations are a small declarative list (:data:`CONFIGS`, or ``--config-file`` JSON of
the same shape): a name, the tables it appears in, an architecture and the per-stack sharing
as multiples of the budget's base depth ``L``. The budget (:data:`BUDGETS`, ``--budget NAME``
or a JSON file, plus ``--set key=value``) fixes width, base depth, updates, minutes, batch,
threads and decoding settings for all configurations alike.

Restartable: a configuration whose ``done.json`` matches its training command is skipped;
one that was interrupted resumes from fairseq's ``checkpoint_last.pt`` (the command is
identical, fairseq restores by default); one whose command changed is moved aside to
``runs/<config>.stale-<time>`` and retrained. The decoding stage is cached by a key over the
checkpoints and decode settings. Progress lines say the stage, k of n, elapsed and ETA.
"""

import argparse
import json
import os
import sys

from fairseq_shared.fairseq_commands import terminate_on_sigterm
from fairseq_shared.experiments.configs import BUDGETS, CONFIGS, TABLES, load_budget, select_configs
from fairseq_shared.experiments.reproduce import reproduce


def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="prepared corpus root (bin/, raw/, spm.model)")
    p.add_argument("--out", required=True, help="output directory (runs/, decode/, tables)")
    p.add_argument("--runs", default=None,
                   help="where checkpoints and training logs go (default <out>/runs)")
    p.add_argument("--budget", default="small",
                   help=f"one of {', '.join(BUDGETS)} or a JSON file (default small)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one budget value, e.g. --set max_update=500 --set threads=2")
    p.add_argument("--configs", help="comma-separated configuration names (default: all "
                   "default ones; optional: universal_wide)")
    p.add_argument("--tables", help=f"only configurations of these tables ({', '.join(TABLES)})")
    p.add_argument("--config-file", help="JSON list of configurations replacing the defaults")
    p.add_argument("--threads", type=int, help="shorthand for --set threads=N")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (configs, parameter counts, state) and exit")
    p.add_argument("--no-decode", action="store_true", help="train only")
    return p


def main(argv=None):
    terminate_on_sigterm()
    args = build_parser().parse_args(argv)
    overrides = list(args.set) + ([f"threads={args.threads}"] if args.threads else [])
    budget = load_budget(args.budget, overrides)
    configs = CONFIGS
    if args.config_file:
        with open(args.config_file) as f:
            configs = json.load(f)
    configs = select_configs(configs, args.configs, args.tables)
    if budget.get("device") == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("[plan] no CUDA device: training and decoding on CPU", flush=True)
            budget["device"] = "cpu"
    os.environ.setdefault("OMP_NUM_THREADS", str(budget["threads"]))
    reproduce(args.data, args.out, budget, configs, dry_run=args.dry_run,
              skip_decode=args.no_decode, runs_dir=args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
