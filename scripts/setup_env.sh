#!/usr/bin/env bash
# Create the project's virtual environment (idempotent). Usage: scripts/setup_env.sh [VENV_DIR]
set -euo pipefail
VENV=${1:-.venv}
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
# torch 2.13.0: a CPU wheel of it is on this project's machines; override TORCH_SPEC elsewhere.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
FAIRSEQ_SPEC=${FAIRSEQ_SPEC:-fairseq-fixed==0.12.3.1}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "[setup] installing $TORCH_SPEC, numpy, cython"
  $PIP install -q "$TORCH_SPEC" "numpy==2.4.6" "cython==3.3.1" setuptools wheel
fi
if ! "$VENV/bin/python" -c "import fairseq" 2>/dev/null; then
  echo "[setup] building $FAIRSEQ_SPEC against the installed torch (takes ~3 minutes the first time)"
  $PIP install -q --no-build-isolation --no-deps "$FAIRSEQ_SPEC"
fi
echo "[setup] installing pinned requirements"
$PIP install -q -r requirements.txt
$PIP install -q --no-deps --no-build-isolation -e .
"$VENV/bin/python" -c "import fairseq_shared, fairseq, torch; print('[setup] ok: torch', torch.__version__, 'fairseq', fairseq.__version__)"
