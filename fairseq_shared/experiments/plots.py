"""BLEU against parameters and against decoding speed, one point per configuration; the
finish of the suites' two-panel curve figures."""

import os
from typing import Dict, List


def plot(rows: List[Dict], out: str) -> List[str]:
    from fairseq_shared.plotting import pyplot

    plt = pyplot()
    paths = []
    for xkey, xlabel, fname in (("params", "unique parameters", "bleu_vs_params.png"),
                                ("decode_tokens_per_s", "decoding speed (output tokens/s)",
                                 "bleu_vs_speed.png")):
        pts = [r for r in rows if r.get(xkey) and r.get("bleu") is not None]
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        for r in pts:
            ax.scatter(r[xkey], r["bleu"], s=30)
            ax.annotate(r["name"], (r[xkey], r["bleu"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("BLEU (sacreBLEU)")
        ax.set_title(f"BLEU against {xlabel}")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = os.path.join(out, fname)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def save_panels(fig, axes, title: str, path, ncol: int = 2, which: str = "major",
                legend: bool = True) -> str:
    """Legend in the last panel (``legend=False``: the figure has its own), grids, the title;
    write ``path`` (110 dpi) and close."""
    import matplotlib.pyplot as plt

    if legend:
        axes[-1].legend(fontsize=7, ncol=ncol)
    for ax in axes:
        ax.grid(alpha=0.3, which=which)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return str(path)
