"""Markdown table cells: one formatter for every table this package writes; a report written
as markdown with its data beside it."""

import json
import math
import os

from fairseq_shared.checkpoint_io import write_text


def fmt(x, spec=".2f", pre=""):
    """``x`` formatted with ``spec`` (after ``pre``); a missing value (None, NaN) is "-"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return pre + format(x, spec)


def write_report(path: str, text: str, data: dict) -> None:
    """``text`` to ``path`` (markdown) and ``data`` to the ``.json`` beside it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_text(path, text)
    write_text(os.path.splitext(path)[0] + ".json", json.dumps(data, indent=1))
