"""Committed rows trained again on a fresh clone: each final record of a committed results
folder (``--from``) is queued under the budget its own record carries, into a fresh results
folder, and the two are set side by side in ``RESULTS/reproduction.md``. Nothing is committed
unless ``--commit`` asks, and then into a git repository of the fresh folder's own, never the
checkout it runs from.

    python -m harness.budget reproduce --data work/bible [--from results/bible_budget] \
        [--rows vanilla_s1,...] [--results work/reproduce/bible_budget] [--commit]

A reproduction is a queue like any other (:mod:`harness.queue`): a killed one resumes, and
two workers share its rows. The fresh folder starts from the committed corpus snapshot, so a
corpus of another build is refused (:func:`harness.corpus.snapshot_corpus`) before any run.
"""

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from harness import budget_curve, queue
from harness.budget_long import reproduction
from harness.corpus import PINNED_FILES, snapshot_corpus
from harness.statistics import markdown_row, markdown_table

REPORT = "reproduction.md"


def committed_rows(source: str) -> Dict[str, Dict]:
    """{item id: final record} of the committed folder ``source``."""
    rows = {p.stem: queue.read_record(p) for p in sorted((Path(source) / "runs").glob("*.json"))}
    if not rows:
        raise SystemExit(f"--from {source}: no runs/*.json there; name a committed results "
                         "folder such as results/bible_budget")
    return rows


def select(rows: Dict[str, Dict], wanted: Optional[str], source: str) -> List[str]:
    """The ids ``--rows`` names (default: every committed row), each checked."""
    if not wanted:
        return list(rows)
    ids = [w.strip() for w in wanted.split(",") if w.strip()]
    unknown = [i for i in ids if i not in rows]
    if unknown:
        raise SystemExit(f"--rows: {', '.join(unknown)} not in {source}/runs; committed: "
                         f"{', '.join(rows)}")
    return ids


def prepare(source: str, results: str, data: str) -> None:
    """A fresh folder (never ``source`` itself) that starts from ``source``'s corpus snapshot,
    and the corpus of ``data`` checked against it and copied in."""
    if Path(results).resolve() == Path(source).resolve():
        raise SystemExit(f"--results {results}: that is the committed folder (--from); "
                         "reproduce into a fresh folder such as work/reproduce/"
                         f"{Path(source).name}")
    pinned = Path(results) / "corpus"
    pinned.mkdir(parents=True, exist_ok=True)
    for name in PINNED_FILES:
        if not (pinned / name).exists() and (Path(source) / "corpus" / name).exists():
            shutil.copyfile(Path(source) / "corpus" / name, pinned / name)
    snapshot_corpus(data, results)


def own_repository(results: str) -> str:
    """The git repository of ``results`` itself (made there if it has none): what
    ``--commit`` commits into, so that a reproduction never commits into the checkout."""
    if not (Path(results) / ".git").exists():
        subprocess.run(["git", "init", "-q", results], check=True)
    return str(Path(results).resolve())


def budget_file(work: str, record: Dict) -> str:
    """The budget ``record`` ran under, as a budget file (``--budget FILE``): the values it
    carries, not today's catalogue's."""
    path = Path(work) / "budgets" / f"{queue.item_id(record['name'], record['seed'])}.json"
    queue.write_result(path, {k: v for k, v in record["budget"].items() if k != "name"})
    return str(path)


def milestones_of(folder: str, ident: str) -> Dict[int, Dict]:
    return {r["update"]: r for r in map(queue.read_record,
                                        sorted((Path(folder) / "milestones").glob(f"{ident}_u*.json")))}


def comparison(source: str, results: str, ids: List[str]) -> str:
    """The reproduced rows beside the committed ones: final BLEU and valid loss, whether the
    final hypotheses are byte-identical, and each common milestone (:func:`reproduction`)."""
    lines = ["# Reproduction", "", f"The final records of `{source}` trained again into "
             f"`{results}` under the budgets they carry (`python -m harness.budget reproduce`). "
             "Each cell: committed / reproduced.", "",
             *markdown_table(["row", "updates", "test BLEU", "valid loss", "final hypotheses",
                              "milestones (valid loss, hypotheses)"], align="lrrrll")]
    for ident in ids:
        path = Path(results) / "runs" / f"{ident}.json"
        old = queue.read_record(Path(source) / "runs" / f"{ident}.json")
        new = queue.read_json(path)
        if new is None:
            lines.append(markdown_row([ident, "not reproduced yet", "", "", "", ""]))
            continue
        loss = [r.get("average_valid_loss", r.get("valid_loss")) for r in (old, new)]
        same = ((Path(source) / old["test"]["hypotheses"]).read_bytes()
                == (Path(results) / new["test"]["hypotheses"]).read_bytes())
        lines.append(markdown_row([
            ident, f"{old['updates']:,} / {new['updates']:,}",
            f"{old['test']['bleu']:.2f} / {new['test']['bleu']:.2f}",
            " / ".join(f"{v:.3f}" if v is not None else "-" for v in loss),
            "identical" if same else "differ",
            reproduction(milestones_of(results, ident), milestones_of(source, ident), results,
                         source) if (Path(source) / "milestones").is_dir() else "-"]))
    return "\n".join(lines) + "\n"


def add_arguments(p) -> None:
    p.set_defaults(results=None)
    p.add_argument("--data", required=True, help="the prepared corpus")
    p.add_argument("--from", dest="source", default="results/bible_budget",
                   help="the committed results folder whose rows are trained again")
    p.add_argument("--rows", default=None,
                   help="item ids such as vanilla_s1,cycle_rev_2L_s2 (default: every row of "
                        "--from/runs)")
    p.add_argument("--work", default=None,
                   help="checkpoints, logs, claims (default: <--results>_work beside it)")
    p.add_argument("--commit", action="store_true",
                   help="commit each reproduced row into a git repository of --results' own")
    p.epilog = "--results: the fresh folder (default work/reproduce/<name of --from>)"


def run(args) -> int:
    rows = committed_rows(args.source)
    ids = select(rows, args.rows, args.source)
    results = args.results or str(Path("work") / "reproduce" / Path(args.source).name)
    work = args.work or str(Path(results).parent / f"{Path(results).name}_work")
    prepare(args.source, results, args.data)
    repo = own_repository(results) if args.commit else None
    contexts = []
    for ident in ids:
        record = rows[ident]
        ctx = queue.Context(args.data, work, results, budget_file(work, record),
                            commit_repo=repo)
        queue.work(budget_curve.SUITE, [queue.Item(record["name"], record["seed"])], ctx)
        contexts.append(ctx)
    report = comparison(args.source, results, ids)
    Path(results, REPORT).write_text(report, encoding="utf-8")
    print(report)
    failed = [i for i in ids
              if not queue.finished(queue.result_path(results, rows[i]["name"], rows[i]["seed"]))]
    not_committed = [m for ctx in contexts for m in ctx.not_committed]
    if failed or not_committed:
        print(f"[reproduce] error: not reproduced: {', '.join(failed) or 'none'}; not "
              f"committed: {'; '.join(not_committed) or 'none'}", file=sys.stderr)
        return 1
    return 0
