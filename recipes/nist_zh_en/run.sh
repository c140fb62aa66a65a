#!/usr/bin/env bash
# nist_zh_en: see recipes/README.md. Usage: recipes/nist_zh_en/run.sh [prepare|train|average|evaluate|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-.venv/bin/python}" -m fairseq_shared.cli.recipes nist_zh_en "${1:-all}" --work "${WORK:-work/nist_zh_en}"
