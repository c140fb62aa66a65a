"""The budget suite's frontier: every final model of ``results/bible_budget/models/`` timed in
one run by two one-thread workers (``results/bible_budget/README.md``, "The frontier").

    python scripts/budget_frontier.py --data work/bible [--workers 2] [--dry-run]

The models are split so that the workers' decoding costs (encoder + decoder layers, from each
run's record) are about equal, the anchor (vanilla 3+3 s1) first in the first worker. Each
worker is ``python -m harness.frontier ... --commit``: a model's record is committed
the moment it is measured (git's index lock is waited for), and the worker that ends last
renders the whole table. A model already recorded with these settings in this machine boot is
skipped (one from another boot is measured again), so the command can be run again after a
stop.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from harness.corpus import check_corpus

RESULTS = Path("results/bible_budget")
ANCHOR = "vanilla_s1"
SETTINGS = ["--threads", "1", "--batch-sizes", "1,32", "--beam", "4", "--warmup", "1",
            "--warmup-batches", "8", "--repeats", "2"]


def costs(results: Path) -> Dict[str, int]:
    """``{model name: layers decoded}`` of every final model that has its run record."""
    out = {}
    for model in sorted((results / "models").glob("*.pt")):
        record = results / "runs" / f"{model.stem}.json"
        if record.exists():
            r = json.loads(record.read_text(encoding="utf-8"))
            out[model.stem] = int(r["N"]) + int(r["decoder_N"])
    return out


def split(costs: Dict[str, int], anchor: str, workers: int) -> List[List[str]]:
    """The anchor first in worker 0, then the costliest model to the least loaded worker."""
    shares: List[List[str]] = [[] for _ in range(workers)]
    load = [0] * workers
    if anchor in costs:
        shares[0].append(anchor)
        load[0] += costs[anchor]
    for name in sorted((n for n in costs if n != anchor), key=lambda n: (-costs[n], n)):
        w = load.index(min(load))
        shares[w].append(name)
        load[w] += costs[name]
    return [s for s in shares if s]


def commands(shares: List[List[str]], data: str, results: Path) -> List[List[str]]:
    return [[sys.executable, "-m", "harness.frontier", "--data", data,
             "--out", str(results / "frontier"), "--work", "work/frontier",
             "--checkpoints", ",".join(f"{n}={results / 'models' / (n + '.pt')}" for n in share),
             "--anchor", ANCHOR, *SETTINGS, "--commit"] for share in shares]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the prepared corpus (work/bible)")
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--dry-run", action="store_true", help="print the workers' commands only")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error(f"--workers {args.workers}: allowed an integer >= 1")
    # the committed models index the dictionaries of the corpus they were trained on
    check_corpus(args.data, args.results)
    found = costs(Path(args.results))
    if not found:
        p.error(f"--results {args.results}: no final model with its run record in models/")
    cmds = commands(split(found, ANCHOR, args.workers), args.data, Path(args.results))
    for cmd in cmds:
        print("python " + " ".join(cmd[1:]), flush=True)
    if args.dry_run:
        return 0
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    running = [subprocess.Popen(cmd, env=env) for cmd in cmds]
    return max(proc.wait() for proc in running)


if __name__ == "__main__":
    sys.exit(main())
