"""matplotlib for files, not screens: every figure of the package is drawn through
:func:`pyplot`."""


def pyplot():
    """``matplotlib.pyplot`` on the off-screen Agg backend, without matplotlib's debug log
    (fairseq leaves the root logger at DEBUG, which would print every font lookup)."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
