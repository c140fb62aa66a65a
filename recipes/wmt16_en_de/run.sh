#!/usr/bin/env bash
# wmt16_en_de: see recipes/README.md. Usage: recipes/wmt16_en_de/run.sh [prepare|train|average|evaluate|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-.venv/bin/python}" -m fairseq_shared.cli.recipes wmt16_en_de "${1:-all}" --work "${WORK:-work/wmt16_en_de}"
