"""The valid loss of one checkpoint, as fairseq logs it during training: ``fairseq-validate``
on the corpus's valid split with the checkpoint's own criterion (label-smoothed cross-entropy
in bits for the translation runs), dropout off.

Training logs the valid loss of the model it holds at each validation; an averaged model (the
budget's final stage) was never validated, so its loss is measured here. On the checkpoint of a
validated update it gives the logged value (a test keeps it so), which makes the two columns
one measurement.
"""

import json
import os
import subprocess
from typing import Dict

from fairseq_shared.fairseq_commands import fairseq_command


def parse_validate_output(text: str) -> Dict[str, float]:
    """loss and nll_loss of the last ``valid_loss`` JSON record of a ``--log-format json`` run."""
    for line in reversed(text.splitlines()):
        start = line.find("{")
        if start < 0 or "valid_loss" not in line:
            continue
        try:
            record = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        return {k: float(record[f"valid_{k}"]) for k in ("loss", "nll_loss")
                if f"valid_{k}" in record}
    raise RuntimeError(f"fairseq-validate printed no valid_loss record:\n{text[-2000:]}")


def valid_loss(checkpoint: str, bin_dir: str, threads: int = 1) -> Dict[str, float]:
    """{"loss": bits, "nll_loss": bits} of ``checkpoint`` on ``bin_dir``'s valid split."""
    cmd = fairseq_command("validate", bin_dir, "--path", checkpoint, "--task", "translation",
                          "--valid-subset", "valid", "--max-tokens", "2048", "--log-format",
                          "json", "--cpu")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-validate {checkpoint} failed ({proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-2000:]}")
    return parse_validate_output(proc.stdout + proc.stderr)
