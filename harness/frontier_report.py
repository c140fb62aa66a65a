"""The frontier's table, plots and "which to pick", rendered from the per-model records
(``<out>/models/*.json``) only, so they can be regenerated at any time by one command."""

import glob
import json
import os
import re
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from harness.frontier_engines import ENGINES
from harness.statistics import markdown_row, markdown_table, save_panels
from fairseq_shared.markdown import fmt
from fairseq_shared.timing.machine import boot_key
from harness.queue import read_record

TOLERANCE = 0.5  # BLEU below the best that still counts as "as good"
ANCHOR = "vanilla"  # the model whose eager fairseq speed is x1.00 (the driver's --anchor)
#: The engines of the short table's speed cells (the README's budget table); every engine,
#: ``hf`` included, has its rows in the full table.
SHORT_ENGINES = ("fairseq", "torchscript", "ct2_float32", "ct2_int8")
RENDER_ONLY = "python -m harness.frontier --render-only"


def load_records(out: str) -> List[Dict]:
    return [read_record(Path(p)) for p in sorted(glob.glob(os.path.join(out, "models", "*.json")))]


def later_runs(folder: str, anchor: str = ANCHOR) -> Dict[str, List[Dict]]:
    """``{run folder: records}`` of the frontier runs made after the first, one folder each
    under ``folder`` (``frontier_later/RUN/models/*.json``); each run must be one machine boot
    with the anchor timed in it, since its ratios divide by that run's anchor."""
    runs = {}
    for run in sorted(p for p in Path(folder).glob("*") if (p / "models").is_dir()):
        records, where = load_records(str(run)), f"{folder}/{run.name}"
        if len({boot_key(r.get("machine")) for r in records}) > 1:
            raise SystemExit(f"{where}: its records come from more than one machine boot; a "
                             "later run's ratios need one (give each run its own folder)")
        if not any(configuration(r["model"]) == anchor for r in records):
            raise SystemExit(f"{where}: no {anchor} model timed in it; its ratios divide by "
                             f"the run's own {anchor} (time it with --checkpoints)")
        runs[where] = records
    return runs


def options(records: List[Dict]) -> List[Dict]:
    """One row per (model, engine) that ran: BLEU/chrF at the smallest batch size, speed and
    per-step cost at every batch size, bytes on disk."""
    rows = []
    for rec in records:
        sizes = [str(b) for b in rec["settings"]["batch_sizes"]]
        for engine in ENGINES:
            e = rec["engines"].get(engine, {})
            if not e.get("batch"):
                continue
            ref = e["batch"].get(sizes[0]) or next(iter(e["batch"].values()))
            rows.append({
                "model": rec["model"], "engine": engine, "params": rec.get("params"),
                "boot": boot_key(rec.get("machine")),
                "bleu": ref["bleu"], "chrf": ref["chrf"], "disk_bytes": e.get("disk_bytes"),
                "batch": {bs: e["batch"][bs] for bs in sizes if bs in e["batch"]},
            })
    return rows


def speed_ratios(rows: List[Dict], anchor: str) -> Dict[tuple, Dict[str, Optional[float]]]:
    """``{(model, engine): {batch size: CPU tok/s over the anchor's eager fairseq}}``, only
    where the anchor was measured in the same machine boot (else None: not comparable)."""
    base = next((r for r in rows if r["model"] == anchor and r["engine"] == "fairseq"), None)
    out = {}
    for r in rows:
        same = base is not None and r.get("boot") == base.get("boot")
        cells = {}
        for bs, c in r["batch"].items():
            ref = base["batch"].get(bs, {}).get("cpu_tokens_per_s") if same else None
            mine = c.get("cpu_tokens_per_s")
            cells[bs] = mine / ref if ref and mine else None
        out[(r["model"], r["engine"])] = cells
    return out


def anchor_model(rows: List[Dict], anchor: str) -> str:
    """The model whose speed is x1.00 in the per-model table: ``anchor`` where it was recorded,
    else the first seed of the configuration it names (``vanilla`` -> ``vanilla_s1``)."""
    models = sorted({r["model"] for r in rows})
    if anchor in models:
        return anchor
    return next((m for m in models if configuration(m) == anchor), anchor)


def boots(records: List[Dict]) -> List[str]:
    """One line per machine boot the records were measured in (which models, on what)."""
    groups: Dict[tuple, List[str]] = {}
    for rec in records:
        groups.setdefault(boot_key(rec.get("machine")), []).append(rec["model"])
    lines = []
    for (host, cpu, boot), models in groups.items():
        where = (f"{host}, {cpu}, boot {boot[:8]}" if boot else
                 "a machine the record does not name (measured before records named it)")
        lines.append(f"{where}: {', '.join(models)}")
    return lines


def configuration(model: str) -> str:
    """Models named ``<configuration>_s<seed>`` are seeds of one configuration."""
    return re.sub(r"_s\d+$", "", model)


def by_configuration(rows: List[Dict]) -> List[Dict]:
    """One option per (configuration, engine): BLEU, tokens/s and bytes averaged over its seeds
    (``bleu_seeds`` keeps each), so that a pick is not one lucky seed. Seeds timed in different
    machine boots get no common boot, which :func:`pick` refuses to rank by speed, and no mean
    speed (None), which the plots leave out."""
    groups: Dict[tuple, List[Dict]] = {}
    for r in rows:
        groups.setdefault((configuration(r["model"]), r["engine"]), []).append(r)
    mean = lambda xs: statistics.mean(xs) if xs and None not in xs else None  # noqa: E731
    out = []
    for (config, engine), seeds in groups.items():
        sizes = sorted({bs for r in seeds for bs in r["batch"]}, key=int)
        boots_ = {r.get("boot") for r in seeds}
        speed = mean if len(boots_) == 1 else (lambda xs: None)
        out.append({"model": config, "engine": engine, "bleu": mean([r["bleu"] for r in seeds]),
                    "bleu_seeds": [r["bleu"] for r in seeds],
                    "boot": boots_.pop() if len(boots_) == 1 else ("several boots", config),
                    "disk_bytes": mean([r.get("disk_bytes") for r in seeds]),
                    "batch": {bs: {"cpu_tokens_per_s": speed([r["batch"].get(bs, {}).get(
                        "cpu_tokens_per_s") for r in seeds])} for bs in sizes}})
    return out


def pick(rows: List[Dict], tolerance: float = TOLERANCE,
         best_set: Optional[Sequence[str]] = None) -> Optional[Dict]:
    """Best BLEU; the fastest (CPU tokens/s, at each batch size) and the smallest (bytes on
    disk) of the options as good as the best: every engine of a configuration in
    ``best_set`` (the configurations not resolved below the best over seeds, from the budget's
    statistics), else, without it, the options within ``tolerance`` BLEU of the best."""
    if not rows:
        return None
    label = lambda r: f"{r['model']} / {r['engine']}"  # noqa: E731
    best = max(rows, key=lambda r: r["bleu"])
    if best_set is not None:
        near = [r for r in rows if r["model"] in best_set]
        rule = {"rule": "configurations not resolved below the best over seeds",
                "best_set": list(best_set)}
    else:
        near = [r for r in rows if r["bleu"] >= best["bleu"] - tolerance]
        rule = {"rule": f"within {tolerance} BLEU of the best", "tolerance_bleu": tolerance}
    seeds = lambda r: r.get("bleu_seeds", [r["bleu"]])  # noqa: E731
    out = {**rule,
           "best_bleu": {"option": label(best), "bleu": best["bleu"], "bleu_seeds": seeds(best)},
           "as_good": [label(r) for r in near], "fastest": {}}
    sizes = sorted({bs for r in rows for bs in r["batch"]}, key=int)
    if len({r.get("boot") for r in near}) > 1:
        out["fastest_refused"] = ("the options were timed in more than one machine boot; "
                                  "measure them in one run to compare their speed")
        sizes = []
    for bs in sizes:
        timed = [r for r in near if r["batch"].get(bs, {}).get("cpu_tokens_per_s")]
        if timed:
            f = max(timed, key=lambda r: r["batch"][bs]["cpu_tokens_per_s"])
            out["fastest"][bs] = {"option": label(f), "bleu": f["bleu"], "bleu_seeds": seeds(f),
                                  "cpu_tokens_per_s": f["batch"][bs]["cpu_tokens_per_s"]}
    sized = [r for r in near if r.get("disk_bytes")]
    if sized:
        s = min(sized, key=lambda r: r["disk_bytes"])
        out["smallest"] = {"option": label(s), "bleu": s["bleu"], "bleu_seeds": seeds(s),
                           "disk_bytes": s["disk_bytes"]}
    return out


#: beside the MB of a model whose export merged LoRA deltas (its record's ``export.lora_merged``)
LORA_MERGED = ("ct2: the LoRA deltas merged into each layer, every layer stored, an unshared "
               "model's size")


def configuration_cells(records: List[Dict], rows: List[Dict],
                        anchor: str = ANCHOR) -> Dict[str, Dict[str, str]]:
    """Per configuration (:func:`by_configuration`, means over seeds), in the records' order, the
    cells of its row; under ``"speed"``, per batch size, each of :data:`SHORT_ENGINES`' CPU speed
    over the anchor configuration's eager fairseq (the numbers under ``"ratios"``)."""
    sizes = [str(b) for b in records[0]["settings"]["batch_sizes"]]
    configs = by_configuration(rows)
    ratios = speed_ratios(configs, configuration(anchor))
    found = {(r["model"], r["engine"]): r for r in configs}
    mb = {e: disk_mb(configs, e) for e in ("fairseq", "ct2_int8")}
    params = {configuration(rec["model"]): rec.get("params") for rec in records}
    merged = {configuration(rec["model"]) for rec in records
              if (rec.get("export") or {}).get("lora_merged")}
    out = {}
    for name in dict.fromkeys(configuration(rec["model"]) for rec in records):
        own = found.get((name, "fairseq"))
        out[name] = {"seeds": str(len(own["bleu_seeds"])) if own else "-",
                     "parameters": f"{params[name]:,}" if params.get(name) else "-",
                     "bleu": _bleu(own) if own else "-",
                     "mb": " / ".join(fmt(by[name], ".2f") if name in by else "-"
                                      for by in mb.values())
                     + (f" ({LORA_MERGED})" if name in merged else ""),
                     "speed": {}, "ratios": {}}
        for bs in sizes:
            got = [ratios.get((name, e), {}).get(bs) for e in SHORT_ENGINES]
            out[name]["ratios"][bs] = got
            out[name]["speed"][bs] = speed_cell(got)
    return out


def disk_mb(configs: List[Dict], engine: str = "ct2_int8") -> Dict[str, float]:
    """{configuration: MB on disk of one engine's model, mean over seeds} where measured;
    ``configs``: :func:`by_configuration`."""
    return {r["model"]: r["disk_bytes"] / 1e6 for r in configs
            if r["engine"] == engine and r["disk_bytes"]}


def speed_cell(ratios: List[Optional[float]]) -> str:
    """One batch size's ratios, one per :data:`SHORT_ENGINES` engine ("-" where not measured)."""
    return " / ".join(f"{x:.2f}" if x else "-" for x in ratios)


def speed_headers(records: List[Dict], anchor: str = ANCHOR) -> List[str]:
    """The headers of :func:`configuration_cells`' speed cells, one per batch size."""
    names = " / ".join(SHORT_ENGINES)
    return [f"x{configuration(anchor)} b={b}: {names}"
            for b in records[0]["settings"]["batch_sizes"]]


def short_table(records: List[Dict], rows: List[Dict], anchor: str = ANCHOR) -> List[str]:
    head = ["configuration", "seeds", "parameters", "BLEU", "MB (fairseq / ct2_int8)",
            *speed_headers(records, anchor)]
    return markdown_table(head, ([name, c["seeds"], c["parameters"], c["bleu"], c["mb"],
                                  *c["speed"].values()]
                                 for name, c in configuration_cells(records, rows, anchor).items()),
                          align="lrrr")


def markdown(records: List[Dict], rows: List[Dict], choice: Optional[Dict],
             anchor: str = ANCHOR, command: str = RENDER_ONLY) -> str:
    if not records:
        return "# Frontier\n\nNo model records yet.\n"
    st = records[0]["settings"]
    sizes = [str(b) for b in st["batch_sizes"]]
    anchor = anchor_model(rows, anchor)
    ratios = speed_ratios(rows, anchor)
    machines = boots(records)
    lines = [
        "# Speed / size / quality frontier", "",
        f"Rendered from `models/*.json` by `{command}`. Each model: the `{st['subset']}` set "
        f"({records[0].get('sentences')} sentences), beam {st['beam']}, lenpen {st['lenpen']}, max "
        f"length {st['max_len_a']} x source + {st['max_len_b']}, {st['threads']} thread, batch "
        f"sizes {', '.join(sizes)}; {st['warmup']} warm-up"
        + (f" (the longest {st['warmup_batches']} batches)" if st.get("warmup_batches") else "")
        + f" + {st['repeats']} timed passes per engine, interleaved across "
        "the model's engines. tok/s: output tokens (EOS included) per second of CPU time "
        "(the median pass), wall clock in brackets. steps: decoder steps of one pass "
        "(fairseq's search; TorchScript's is the same search when its hypotheses are "
        "identical), ms/step: CPU milliseconds per decoder step. BLEU/chrF at batch "
        f"{sizes[0]}. identical: hypotheses equal to fairseq's at every batch size (engines "
        f"that claim exactness). x{anchor}: CPU tok/s over {anchor}'s eager fairseq at the "
        "same batch size, given only for records measured in the same machine boot.", "",
        ("Measured on one machine boot: " + machines[0] if len(machines) == 1 else
         f"**Measured in {len(machines)} machine boots**; speeds compare only within one: "
         + "; ".join(machines)), "",
        "## By configuration (means over seeds, each seed's BLEU in brackets; CPU tok/s over "
        f"{configuration(anchor)}'s eager fairseq; - where not measured or not comparable)", "",
        *short_table(records, rows, anchor), "",
        "## Every option", "",
        *markdown_table(["model", "engine", "BLEU", "chrF", "MB", *(
            f"tok/s b={b} | x{anchor} b={b} | steps b={b} | ms/step b={b}" for b in sizes),
            "identical"], align="llrrr" + "rrrr" * len(sizes) + "l"),
    ]
    for r in rows:
        cells = []
        for bs in sizes:
            c = r["batch"].get(bs, {})
            ratio = ratios[(r["model"], r["engine"])].get(bs)
            cells.append(f"{fmt(c.get('cpu_tokens_per_s'), '.1f')} "
                         f"({fmt(c.get('wall_tokens_per_s'), '.1f')}) | "
                         f"{'x' + format(ratio, '.2f') if ratio else '-'} | "
                         f"{fmt(c.get('steps'), 'd')} | {fmt(c.get('cpu_ms_per_step'), '.2f')}")
        same = [c for c in r["batch"].values() if "identical" in c]
        ident = ("-" if r["engine"] == "fairseq" else
                 ", ".join(f"{c['identical']}/{c['compared']}" for c in same))
        mb = r["disk_bytes"] / 1e6 if r.get("disk_bytes") else None
        lines.append(markdown_row([r["model"], r["engine"], fmt(r["bleu"], ".2f"),
                                   fmt(r["chrf"], ".2f"), fmt(mb, ".2f"), *cells, ident]))
    missing = [f"{rec['model']} {engine}: {e['reason']}" for rec in records
               for engine, e in rec["engines"].items() if not e.get("batch") and e.get("reason")]
    if missing:
        lines += ["", "Not measured:", ""] + [f"- {m}" for m in missing]
    if choice:
        lines += ["", f"## Which to pick ({choice['rule']})", "",
                  "Models named `<configuration>_s<seed>` count as one configuration: its BLEU, "
                  "speed and size are the means over its seeds (each seed's BLEU in brackets).", "",
                  f"- best BLEU: {choice['best_bleu']['option']} ({_bleu(choice['best_bleu'])})"]
        if "fastest_refused" in choice:
            lines.append(f"- fastest: not given: {choice['fastest_refused']}")
        for bs, f in choice["fastest"].items():
            lines.append(f"- fastest at batch {bs}: {f['option']} ({_bleu(f)} BLEU, "
                         f"{f['cpu_tokens_per_s']:.1f} CPU tok/s)")
        if "smallest" in choice:
            s = choice["smallest"]
            lines.append(f"- smallest: {s['option']} ({_bleu(s)} BLEU, "
                         f"{s['disk_bytes'] / 1e6:.2f} MB)")
    sig = next((c["bleu_signature"] for r in rows for c in r["batch"].values()), "")
    lines += ["", f"BLEU signature: `{sig}`", ""]
    return "\n".join(lines)


def _bleu(option: Dict) -> str:
    seeds = option.get("bleu_seeds") or [option["bleu"]]
    return (f"{option['bleu']:.2f}" if len(seeds) == 1 else
            f"{option['bleu']:.2f} [{', '.join(format(b, '.2f') for b in seeds)}]")


def plots(rows: List[Dict], out: str) -> List[str]:
    """BLEU against CPU tokens/s (a panel per batch size) and against MB on disk, one point per
    option of ``rows`` (:func:`render` passes the configurations' means over seeds)."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    from fairseq_shared.plotting import pyplot

    plt = pyplot()
    markers = dict(zip(ENGINES, ("o", "s", "^", "v", "D")))
    models = sorted({r["model"] for r in rows})
    colors = {m: f"C{i % 10}" for i, m in enumerate(models)}
    sizes = sorted({bs for r in rows for bs in r["batch"]}, key=int)
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.5), squeeze=False)
    for ax, bs in zip(axes[0], sizes):
        for r in rows:
            x = r["batch"].get(bs, {}).get("cpu_tokens_per_s")
            if x:
                ax.scatter(x, r["bleu"], marker=markers[r["engine"]], c=colors[r["model"]])
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # 200, 500, 1000, 2000, ...
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"output tokens per CPU second, batch {bs}")
        ax.set_ylabel("BLEU")
    _legend(axes[0][-1], models, colors, markers)
    speed = save_panels(fig, axes[0], None, os.path.join(out, "frontier_bleu_vs_speed.png"),
                        legend=False, dpi=120)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for r in rows:
        if r.get("disk_bytes"):
            ax.scatter(r["disk_bytes"] / 1e6, r["bleu"], marker=markers[r["engine"]],
                       c=colors[r["model"]])
    ax.set_xlabel("model on disk (MB)")
    ax.set_ylabel("BLEU")
    _legend(ax, models, colors, markers)
    return [speed, save_panels(fig, [ax], None, os.path.join(out, "frontier_bleu_vs_mb.png"),
                               legend=False, dpi=120)]


def _legend(ax, models, colors, markers):
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[m], marker="o", ls="", label=m) for m in models]
    handles += [Line2D([], [], color="black", marker=mk, ls="", label=e)
                for e, mk in markers.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))


def render(out: str, anchor: str = ANCHOR,
           best_set: Optional[Sequence[str]] = None) -> Dict[str, str]:
    """``frontier.md``, ``pick.json`` and the two plots in ``out``, from its records;
    ``best_set``: see :func:`pick` (the budget's render passes it, and its table names that
    command, since ``--render-only`` would pick without it)."""
    records = load_records(out)
    rows = options(records)
    choice = pick(by_configuration(rows), best_set=best_set)
    paths = {"md": os.path.join(out, "frontier.md"), "pick": os.path.join(out, "pick.json")}
    command = RENDER_ONLY if best_set is None else "python -m harness.budget render"
    Path(paths["md"]).write_text(markdown(records, rows, choice, anchor, command), encoding="utf-8")
    Path(paths["pick"]).write_text(json.dumps(choice, indent=1), encoding="utf-8")
    plotted = plots(by_configuration(rows), out) if rows else []
    return {**paths, **{os.path.basename(p): p for p in plotted}}
