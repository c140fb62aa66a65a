"""The torch versions the plug-in supports, checked at import (before fairseq is imported, so
an unsupported torch gets one clear line instead of a traceback from deep inside fairseq).

The range is the one ``pyproject.toml`` declares and ``scripts/compat_matrix.sh`` measures
(``results/compat.md``): a torch older than the minimum is refused; one newer than the newest
measured gets a warning only."""

import re
import warnings
from typing import Tuple

MIN_TORCH = (2, 4)  # pyproject.toml: torch>=2.4 (add_safe_globals, weights-only loading)
NEWEST_MEASURED = (2, 15)


def _minor(version: str) -> Tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if not match:
        raise ImportError(f"fairseq_shared: cannot read the torch version '{version}'")
    return int(match.group(1)), int(match.group(2))


def check_torch(version: str) -> None:
    found = _minor(version)
    supported = f"{MIN_TORCH[0]}.{MIN_TORCH[1]} to {NEWEST_MEASURED[0]}.{NEWEST_MEASURED[1]}"
    if found < MIN_TORCH:
        raise ImportError(
            f"fairseq_shared needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} (supported: "
            f"{supported}, see results/compat.md); this environment has torch {version}")
    if found > NEWEST_MEASURED:
        warnings.warn(f"fairseq_shared: torch {version} is newer than the newest measured "
                      f"({supported}, see results/compat.md)", stacklevel=2)
