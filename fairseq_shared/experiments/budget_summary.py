"""The table the README leads with: one row per budget configuration, joining what the budget
measured of its final models (BLEU over seeds, the paired bootstrap against vanilla 3+3, the
training CPU per update of one run on one machine) with what the frontier measured of the same
final models (size on disk, every engine's decoding speed over vanilla's). Written as
``summary.md`` by ``python -m fairseq_shared.cli.budget render``, from committed files only."""

from typing import Dict, List, Optional

from fairseq_shared.experiments import frontier_report
from fairseq_shared.experiments.evidence_report import fmt_spread

# Row order and what each configuration is, for a reader of the README (the names are the
# plots' legends and the budget's own). Kasai et al.'s shallow decoder sits next to SAN: both
# are what a user would pick for decoding speed.
ROWS = {
    "vanilla": "vanilla",
    "cycle_rev_2L": "cycle_rev, 6 layers over 3 sets (Takase & Kiyono)",
    "vanilla_2L": "vanilla, twice as deep",
    "attn_shared": "attention shared by all layers (ALBERT)",
    "nodec_ffn": "no decoder FFN",
    "one_wide_ffn": "One Wide FFN (Pires et al.)",
    "vanilla_dec2L": "vanilla, decoder twice as deep",
    "san_dec2L": "SAN, the paper's policy (Xiao et al.)",
    "vanilla_2L_dec1": "deep encoder, shallow decoder (Kasai et al.)",
}


def summary_table(finals: Dict[str, Dict[int, Dict]], paired: Dict[str, str],
                  cpu_per_update: Optional[Dict[str, float]], frontier: List[Dict],
                  lookup_bleu: Optional[float], baseline: str = "vanilla") -> List[str]:
    """``finals``: {configuration: {seed: final record}}; ``paired``: the bootstrap cell of each
    configuration; ``cpu_per_update``: {configuration: CPU s/update} or None; ``frontier``: the
    frontier's records (:func:`frontier_report.load_records`), possibly none yet."""
    cells, sizes, speeds = {}, [None], ["decoding speed"]
    if frontier:
        cells = frontier_report.configuration_cells(
            frontier, frontier_report.options(frontier), baseline)
        sizes = [str(b) for b in frontier[0]["settings"]["batch_sizes"]]
        speeds = frontier_report.speed_headers(frontier, baseline)
    head = ["model", "layers", "parameters", "seeds", "test BLEU, final",
            f"vs {baseline} 3+3, same seed (ΔBLEU, bootstrap p)", "training CPU per update",
            "MB (fairseq / ct2_int8)", *speeds]
    lines = ["| " + " | ".join(head) + " |",
             "|---|---|---:|---:|---:|---|---:|---|" + "---|" * len(speeds)]
    if lookup_bleu is not None:
        lines.append("| lookup baseline (closest training verse) | - | - | - | "
                     f"{lookup_bleu:.2f} |" + " - |" * (len(head) - 5))
    base_rate = (cpu_per_update or {}).get(baseline)
    for name in (n for n in [*ROWS, *sorted(set(finals) - set(ROWS))] if n in finals):
        runs = [finals[name][s] for s in sorted(finals[name])]
        rate = (cpu_per_update or {}).get(name)
        own = cells.get(name, {})
        row = [f"`{name}`: {ROWS.get(name, runs[0]['label'])}",
               f"{runs[0]['N']}+{runs[0]['decoder_N']}", f"{runs[0]['params']:,}",
               str(len(runs)), fmt_spread([r["test"]["bleu"] for r in runs]),
               paired.get(name, "-"), f"{rate / base_rate:.2f}" if rate and base_rate else "-",
               own.get("mb", "not measured"),
               *[own.get("speed", {}).get(bs, "-") for bs in sizes]]
        lines.append("| " + " | ".join(row) + " |")
    return lines
