"""The README's results table: seven columns of the full table (``summary.md``,
:mod:`~harness.budget_summary`), and under it the fixed-size answers
(:mod:`~harness.budget_answers`), rendered from the same committed records and written into
README.md between its markers.

    python -m harness.readme_table [--results results/bible_budget] [--readme README.md] [--check]

``--check`` writes nothing and exits 1 where the README's table is not the rendered one.
"""

import argparse
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional

from harness.statistics import (POOLING_MARK, Difference, fmt_difference, markdown_row, markdown_table,
                                seed_summary)

BEGIN = "<!-- results table: rendered by `python -m harness.readme_table` from the records; do not edit -->"
END = "<!-- end of the results table -->"
BASELINE = "vanilla"
#: where the CPU speed ratios are read: the smallest and the largest batch size of the frontier
BATCH_SIZES = ("1", "32")


def verdict(d: Optional[Difference], spec: str, lower_is_better: bool = False) -> str:
    """``worse: -1.93 [-2.99, -0.88]``, ``better: ...`` or ``not resolved: ...`` (the interval
    covers 0); ``-`` for no comparison."""
    if d is None:
        return "-"
    text = fmt_difference(d, spec, seed_counts=False)
    if not d.resolved:
        return text
    better = (d.delta < 0) if lower_is_better else (d.delta > 0)
    return f"{'better' if better else 'worse'}: {text}"


def bleu_cell(values: List[float]) -> str:
    s = seed_summary(values)
    if s.sd is None:
        return f"{s.mean:.2f} (1 seed)"
    return f"{s.mean:.2f} ± {s.sd:.2f} ({len(values)} seeds)"


def fastest_cell(cell: Dict, engines) -> str:
    """The engine fastest at batch 1 (CPU tokens/s over vanilla 3+3's eager fairseq), its ratio
    at batch 1 and 32, and its MB on disk (fairseq's file for fairseq and TorchScript)."""
    ratios = cell.get("ratios", {})
    first = ratios.get(BATCH_SIZES[0]) or []
    timed = [(r, e) for r, e in zip(first, engines) if r]
    if not timed:
        return "not timed"
    _, engine = max(timed)
    i = engines.index(engine)
    at = [ratios.get(bs, [None] * len(engines))[i] for bs in BATCH_SIZES]
    mb = dict(zip(("fairseq", "ct2_int8"), cell.get("mb", "- / -").split(" / ")))
    size = mb.get("fairseq" if engine in ("fairseq", "torchscript") else engine, "-")
    return (" / ".join(f"{x:.2f}" if x else "-" for x in at)
            + f" ({engine}" + (f", {size} MB" if size != "-" else "") + ")")


def table(finals: Dict[str, Dict[int, Dict]], versus: Dict[str, Dict], cells: Dict[str, Dict],
          distilled: List[str], lookup_bleu: Optional[float], order: List[str],
          describe: Dict[str, str], engines=("fairseq", "torchscript", "ct2_float32",
                                              "ct2_int8"), later: List[str] = ()) -> List[str]:
    """The README's table: ``finals`` {configuration: {seed: final record}}, ``versus``
    (:func:`harness.budget_findings.comparisons`), ``cells``
    (:func:`harness.budget_summary.speed_cells`), ``distilled``: the configurations trained on a
    teacher's outputs, whose valid loss (the likelihood of the real references) is stated, not
    compared; ``later``: the configurations timed in a later frontier run. Rows in ``order``,
    then the rest by name; a note under the table says what each cell is."""
    head = ["model", "layers", "parameters", "test BLEU, final (seeds)",
            f"ΔBLEU vs {BASELINE} 3+3 [95%]", f"Δ valid loss vs {BASELINE} 3+3 [95%] (bits)",
            f"speed (x {BASELINE} 3+3's fairseq), fastest engine: b={' / b='.join(BATCH_SIZES)}"]
    lines = markdown_table(head, align="llrrllr")
    if lookup_bleu is not None:
        lines.append(markdown_row(["lookup baseline (closest training verse)", "-", "-",
                                   f"{lookup_bleu:.2f}", "-", "-", "-"]))
    for name in (n for n in [*order, *sorted(set(finals) - set(order))] if n in finals):
        runs = [finals[name][s] for s in sorted(finals[name])]
        diff = versus.get(name, {})
        if name in distilled:
            losses = [r["average_valid_loss"] for r in runs if r.get("average_valid_loss")]
            loss = (f"not compared: trained on the teacher's outputs "
                    f"({statistics.mean(losses):.3f} on the real references)")
        else:
            loss = verdict(diff.get("valid_loss"), "+.3f", lower_is_better=True)
        lines.append(markdown_row([
            f"`{name}`: {describe.get(name, runs[0]['label'])}",
            f"{runs[0]['N']}+{runs[0]['decoder_N']}", f"{runs[0]['params']:,}",
            bleu_cell([r["test"]["bleu"] for r in runs]), verdict(diff.get("bleu"), "+.2f"),
            loss, fastest_cell(cells.get(name, {}), list(engines))]))
    timed_later = [n for n in finals if n in later]
    return lines + ["", "Final models (the average of the last 5 checkpoints). Δ: the difference "
                    "of the seed means with its 95% interval (seeds, and test sampling for "
                    "BLEU; the seed sd pooled over alike rows, distilled students apart), "
                    "\"not resolved\" where it covers 0, "
                    f"{POOLING_MARK} where another pooling turns the verdict (no finding is "
                    "drawn from it). A distilled student's valid loss "
                    "is its likelihood of the real references after training on the teacher's "
                    "outputs, so it is stated, not compared. Speed: CPU tokens/s (one thread, "
                    "beam 4) over vanilla 3+3's eager fairseq at batch 1 / 32, in the engine "
                    "fastest at batch 1"
                    + (f"; {', '.join(f'`{n}`' for n in timed_later)} timed in later runs, each "
                       "beside vanilla 3+3, each engine over vanilla 3+3's same engine in that run "
                       "times vanilla 3+3's ratio here (ratios within a fifth are noise there)"
                       if timed_later else "") + "."]


def render(results: str) -> List[str]:
    """The table from the committed records of ``results`` (the budget's folder), read as
    :func:`harness.budget_report.render` reads them for ``summary.md``."""
    from fairseq_shared.data.pipeline import read_lines
    from harness import beam1, budget_answers, budget_report, frontier_report
    from harness.budget_findings import comparisons, row_record
    from harness.budget_rates import training_rates
    from harness.budget_summary import ROWS, speed_cells
    import json

    out = Path(results)
    audit = json.loads((out / "corpus" / "audit.json").read_text(encoding="utf-8"))
    lookup = audit["splits"]["test"].get("lookup")
    stages, finals, _ = budget_report.load_with_long(results)
    versus, pools = comparisons(finals, results, read_lines(out / "corpus" / "test.ref"))
    frontier = frontier_report.load_records(str(out / "frontier"))
    later = frontier_report.later_runs(str(out / budget_report.LATER_FRONTIER))
    cells, _ = speed_cells(frontier, later)
    first = {frontier_report.configuration(r["model"]) for r in frontier}
    distilled = [n for n in finals if row_record(n, {}, finals)["training_data"] != "raw"]
    answers = budget_answers.section(finals, versus, stages, training_rates(results, finals),
                                     pools, frontier, later, beam1.load(results), level="###")
    lines = table(finals, versus, cells, distilled, lookup["bleu"] if lookup else None,
                  list(ROWS), ROWS, frontier_report.SHORT_ENGINES,
                  later=[n for n in cells if n not in first])
    return lines + ([""] + answers[:-1] if answers else [])


def block(readme: str) -> str:
    """The README's table as written between the markers."""
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md: no markers {BEGIN!r} ... {END!r}")
    return readme.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def written(readme: str, lines: List[str]) -> str:
    """``readme`` with ``lines`` between the markers."""
    head, rest = readme.split(BEGIN, 1)
    return head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + rest.split(END, 1)[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default="results/bible_budget", help="the budget's results folder")
    p.add_argument("--readme", default="README.md", help="the page whose table is written")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 where the page's table is not the rendered one")
    args = p.parse_args(argv)
    page = Path(args.readme)
    body = page.read_text(encoding="utf-8")
    lines = render(args.results)
    if args.check:
        same = block(body) == "\n".join(lines)
        print(f"{page}: the results table is {'the rendered one' if same else 'not the rendered one'}")
        return 0 if same else 1
    block(body)  # the markers are there
    page.write_text(written(body, lines), encoding="utf-8")
    print(f"{page}: results table written ({len(lines) - 2} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
