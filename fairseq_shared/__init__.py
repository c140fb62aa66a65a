"""fairseq-shared: cross-layer sharing for fairseq Transformers (load with --user-dir)."""

import torch as _torch

from fairseq_shared.versions import check_torch as _check_torch

_check_torch(_torch.__version__)  # before fairseq: one clear line for an unsupported torch

from fairseq_shared import compat  # noqa: F401  (must run before fairseq loads checkpoints)
from fairseq_shared import models  # noqa: F401  (registers the model and architectures)

__version__ = "0.1.0"
