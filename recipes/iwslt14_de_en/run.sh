#!/usr/bin/env bash
# iwslt14_de_en: see recipes/README.md. Usage: recipes/iwslt14_de_en/run.sh [prepare|train|average|evaluate|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-.venv/bin/python}" -m fairseq_shared.cli.recipes iwslt14_de_en "${1:-all}" --work "${WORK:-work/iwslt14_de_en}"
