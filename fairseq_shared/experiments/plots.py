"""The finish of the suites' two-panel curve figures."""


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
