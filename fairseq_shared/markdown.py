"""Markdown table cells: one formatter for every table this package writes."""

import math


def fmt(x, spec=".2f", pre=""):
    """``x`` formatted with ``spec`` (after ``pre``); a missing value (None, NaN) is "-"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return pre + format(x, spec)
