"""The one command shape of every queued suite: ``run | plan | render`` (and a suite's own
extra commands), built from a :class:`Command` declaration.

* ``run`` is a worker of :func:`queue.work` (one per core); ``--commit`` commits each finished
  item's files at once;
* ``plan`` lists every item with its state (done, running, waits for, failed, todo);
* ``render`` rebuilds the suite's tables and plots from the committed files only.
"""

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from harness import queue


@dataclass
class Command:
    suite: queue.Suite
    doc: str
    results: str  # default --results
    work: str  # default --work
    budget: str  # default --budget
    items: Callable[[argparse.Namespace], List[queue.Item]]
    render: Callable[[argparse.Namespace], str]
    # before ``run``: writes the corpus snapshot, -> its files (committed under their own
    # message when they changed, not with whichever run the worker commits next)
    prepare: Optional[Callable[[argparse.Namespace], Sequence[Path]]] = None
    plan: Optional[Callable[[argparse.Namespace, List[queue.Item]], None]] = None  # extra lines
    # name -> (add its arguments, run it -> exit code)
    commands: Dict[str, Tuple[Callable, Callable]] = field(default_factory=dict)


def build_parser(cmd: Command) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=cmd.doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("run", "plan", "render", *cmd.commands):
        s = sub.add_parser(name)
        s.add_argument("--results", default=cmd.results)
        if name in cmd.commands:
            cmd.commands[name][0](s)
            continue
        if name != "render":
            s.add_argument("--data", required=name == "run", help="the prepared corpus")
            s.add_argument("--work", default=cmd.work, help="checkpoints, logs, claims")
            s.add_argument("--budget", default=cmd.budget, help=f"default {cmd.budget}")
            s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           help="override one budget value")
            s.add_argument("--queue", default=None, help="name:seed,... (default: the full queue)")
        if name == "run":
            s.add_argument("--commit", action="store_true",
                           help="git-commit each finished item's files at once")
    return p


def print_plan(args, items: Sequence[queue.Item]) -> None:
    ctx = queue.Context(args.data, args.work, args.results, args.budget, args.set)
    states = [queue.state(item, ctx) for item in items]
    print(f"{sum(s == 'done' for s in states)}/{len(items)} finished:")
    for item, state in zip(items, states):
        print(f"  {item.id}: {state}")


def main(cmd: Command, argv=None) -> int:
    args = build_parser(cmd).parse_args(argv)
    if args.command == "render":
        print(cmd.render(args))
        return 0
    if args.command in cmd.commands:
        return cmd.commands[args.command][1](args)
    items = cmd.items(args)
    if args.command == "plan":
        if cmd.plan:
            cmd.plan(args, items)
        else:
            print_plan(args, items)
        return 0
    from fairseq_shared.fairseq_commands import terminate_on_sigterm

    terminate_on_sigterm()
    snapshot = cmd.prepare(args) if cmd.prepare else []
    repo = queue.results_repository(args.results) if args.commit else None
    ctx = queue.Context(args.data, args.work, args.results, args.budget, args.set, commit_repo=repo)
    if repo:  # under its own message, not with whichever run the worker commits next
        changed = [p for p in snapshot if queue.uncommitted([p], repo)]
        if changed:
            ctx.commit(changed, f"{cmd.suite.tag}: corpus snapshot of {args.data} "
                                f"({', '.join(p.name for p in changed)})")
    finished = queue.work(cmd.suite, items, ctx)
    print(f"[{cmd.suite.tag}] this worker finished: {', '.join(finished) or 'nothing'}")
    if ctx.not_committed:
        print(f"[{cmd.suite.tag}] error: {len(ctx.not_committed)} commit(s) failed, nothing of "
              f"them is committed: {'; '.join(ctx.not_committed)}", file=sys.stderr)
        return 1
    failed = queue.failed_items(items, ctx)
    if failed:
        print(f"[{cmd.suite.tag}] error: {len(failed)} item(s) failed: "
              + "; ".join(f"{i.id} ({queue.failure_path(ctx.work, i.id)})" for i in failed),
              file=sys.stderr)
        return 1
    return 0
