"""The torch versions the plug-in supports, checked at import (before fairseq is imported, so
an unsupported torch gets one clear line instead of a traceback from deep inside fairseq).

The range is the one ``pyproject.toml`` declares and ``scripts/compat_matrix.sh`` measures
(``results/compat/README.md``): a torch older than the minimum is refused; one newer than the newest
measured gets a warning only."""

import re
import warnings
from typing import Tuple

# pyproject.toml: torch>=2.6. Measured (results/compat/README.md): torch 2.4.1 passes the core
# subset but for safe loading: it has no get_unsafe_globals_in_checkpoint (2.5+), and before 2.6
# torch.load does not default to weights_only, so fairseq would unpickle a malicious file.
MIN_TORCH = (2, 6)
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
            f"{supported}, see results/compat/README.md); this environment has torch {version}")
    if found > NEWEST_MEASURED:
        warnings.warn(f"fairseq_shared: torch {version} is newer than the newest measured "
                      f"({supported}, see results/compat/README.md)", stacklevel=2)
