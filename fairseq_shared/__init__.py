"""fairseq-shared: cross-layer sharing for fairseq Transformers (load with --user-dir)."""

from fairseq_shared import compat  # noqa: F401  (must run before fairseq loads checkpoints)
from fairseq_shared import models  # noqa: F401  (registers the model and architectures)

__version__ = "0.1.0"
