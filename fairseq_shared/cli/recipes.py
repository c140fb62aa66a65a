"""The papers' recipes (prepare, train, average, evaluate): the command line of
``python -m fairseq_shared.cli.recipes``; what it does is :mod:`fairseq_shared.data.recipes`
(printed by ``--help``)."""

import argparse
import json
import shlex
import sys
from pathlib import Path

from fairseq_shared.data import recipes as library


def main(argv=None):
    p = argparse.ArgumentParser(description=library.__doc__.split("\n\n")[0])
    p.add_argument("task", nargs="?", choices=sorted(library.TASKS))
    p.add_argument("step", nargs="?", default="prepare",
                   choices=["prepare", "train", "average", "evaluate", "all", "show"])
    p.add_argument("--work", default=None, help="work folder (default work/TASK)")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    if args.list or not args.task:
        for name, t in library.TASKS.items():
            print(f"{name:16s} {t.src}->{t.tgt}  data: ${t.env}  {t.notes}")
        return 0
    from fairseq_shared.data.recipe_runs import average, evaluate, train, train_command

    task = library.TASKS[args.task]
    work = Path(args.work or Path("work") / task.name)
    if args.step == "show":
        print(" ".join(shlex.quote(c) for c in train_command(task, work)))
        return 0
    if args.step in ("prepare", "all"):
        library.prepare(task, work)
    if args.step in ("train", "all"):
        train(task, work)
    if args.step in ("average", "all"):
        average(task, work)
    if args.step in ("evaluate", "all"):
        print(json.dumps({k: {"bleu": v["bleu"], "chrf": v["chrf"]}
                          for k, v in evaluate(task, work).items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
