#!/usr/bin/env bash
# WMT17 (Xiao et al.): Usage: recipes/wmt17/run.sh SRC TGT [prepare|train|average|evaluate|all]
# with SRC/TGT one of en<->de, fi, lv, ru. See recipes/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=${1:?source language}; TGT=${2:?target language}
exec "${PYTHON:-.venv/bin/python}" -m fairseq_shared.cli.recipes "wmt17_${SRC}_${TGT}" "${3:-all}" --work "${WORK:-work/wmt17_${SRC}_${TGT}}"
