"""fairseq-shared: cross-layer sharing for fairseq Transformers (load with --user-dir)."""

from fairseq_shared.library_modules import refuse_a_library_module_run_as_a_command as _refuse

_refuse()  # python -m fairseq_shared.data.audit: one line naming the command, status 2

import torch as _torch  # noqa: E402

from fairseq_shared.versions import check_torch as _check_torch

_check_torch(_torch.__version__)  # before fairseq: one clear line for an unsupported torch

from fairseq_shared import compat  # noqa: F401  (must run before fairseq loads checkpoints)
from fairseq_shared import models  # noqa: F401  (registers the model and architectures)

__version__ = "0.1.0"
