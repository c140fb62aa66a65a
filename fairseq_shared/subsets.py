"""Which sentences of a test set a command decodes: all of them, or an evenly spaced subset (the
same ids for timing, verification and the harness, so their numbers are of one set)."""

from typing import Optional

import numpy as np


def select_ids(num: int, subset: Optional[int]) -> np.ndarray:
    """Ids of the sentences to decode: all, or ``subset`` evenly spaced over the test set."""
    if not subset or subset >= num:
        return np.arange(num, dtype=np.int64)
    return np.unique(np.linspace(0, num - 1, subset).round().astype(np.int64))
