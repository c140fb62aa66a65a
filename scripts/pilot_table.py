"""The regularisation pilot's table, from its committed run files.

    python scripts/pilot_table.py results/bible_budget/pilot > results/bible_budget/pilot/table.md

One row per ``dropout_*/runs/vanilla_s1.json``: valid loss (label-smoothed, base 2) every 500
updates, the update of the best valid loss, test BLEU/chrF at the end, CPU seconds per update;
then sacreBLEU's paired bootstrap of each row against the first, and the lookup baseline (the
same test set: ``results/bible_clean/corpus``).
"""

import json
import sys
from pathlib import Path


def rows(pilot: Path):
    for path in sorted(pilot.glob("dropout_*/runs/vanilla_s1.json")):
        r = json.loads(path.read_text())
        curve = {p["update"]: p["valid_loss"] for p in r["curve"]}
        best = min(curve, key=curve.get)
        yield r["budget"]["dropout"], curve, best, r


def main(pilot: str) -> None:
    marks = list(range(500, 4001, 500))
    print("| dropout | " + " | ".join(f"valid {u}" for u in marks)
          + " | best valid (update) | test BLEU | test chrF | CPU s/update |")
    print("|---" * (len(marks) + 5) + "|")
    for dropout, curve, best, r in rows(Path(pilot)):
        cells = [f"{curve[u]:.3f}" if u in curve else "-" for u in marks]
        print(f"| {dropout} | " + " | ".join(cells)
              + f" | {curve[best]:.3f} ({best}) | {r['test']['bleu']:.2f} | {r['test']['chrf']:.2f}"
              f" | {r['cpu_seconds_per_update']} |")
    print(f"\nBLEU signature: `{r['test']['bleu_signature']}`")
    from fairseq_shared.scoring import score
    from harness.statistics import paired_bootstrap

    corpus = Path("results/bible_clean/corpus")
    refs = (corpus / "test.ref").read_text(encoding="utf-8").splitlines()
    lookup = score((corpus / "lookup.test.hyp").read_text(encoding="utf-8").splitlines(), refs)
    print(f"\nLookup baseline (no model, same test set): BLEU {lookup['bleu']:.2f}, "
          f"chrF {lookup['chrf']:.2f}.")
    found = list(rows(Path(pilot)))
    hyps = [(d, (Path(pilot) / f"dropout_{d}" / r["test"]["hypotheses"]).read_text(
        encoding="utf-8").splitlines()) for d, _, _, r in found]
    for d, h in hyps[1:]:
        p = paired_bootstrap(hyps[0][1], h, refs)
        print(f"Paired bootstrap (1,000 samples), dropout {d} against {hyps[0][0]}: "
              f"BLEU p = {p['bleu_p']:.3f}, chrF p = {p['chrf_p']:.3f}.")


if __name__ == "__main__":
    main(sys.argv[1])
