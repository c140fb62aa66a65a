#!/usr/bin/env bash
# The compatibility matrix (issue 23, item 4; not in the default suite): a fresh virtual
# environment per torch version, each with the same fairseq (fairseq-fixed 0.12.3.1, built
# against that torch) and the pinned requirements, through scripts/setup_env.sh; then a core
# test subset in each. Writes results/compat/README.md (or $OUT).
#   nice -n 15 scripts/compat_matrix.sh [WORK_DIR]      (default work/compat)
# TORCH_VERSIONS (default "2.6.0 2.13.0 2.15.0"): from the configured package index; off this
# project's machines torch 2.4 / 2.15 are the CUDA builds of PyPI (several GB each).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-$ROOT/work/compat}
OUT=${OUT:-$ROOT/results/compat/README.md}
VERSIONS=${TORCH_VERSIONS:-2.6.0 2.13.0 2.15.0}
# One row file per version, kept between runs; the table is rendered from all of them.
ROWS_DIR=${ROWS_DIR:-$ROOT/results/compat}
CORE_TESTS=${CORE_TESTS:-tests/test_sharing.py tests/test_model.py tests/test_san.py tests/test_compat.py tests/test_export.py}
mkdir -p "$WORK" "$ROWS_DIR"
for v in $VERSIONS; do
  venv="$WORK/torch-$v"
  log="$WORK/torch-$v.log"
  echo "[compat] torch $v: environment $venv (log $log)"
  t0=$(date +%s)
  if TORCH_SPEC="torch==$v" bash "$ROOT/scripts/setup_env.sh" "$venv" > "$log" 2>&1; then
    setup="ok"
    cd "$ROOT"
    env -u PYTHONPATH OMP_NUM_THREADS=1 "$venv/bin/python" -m pytest -q -p no:xdist \
        -p no:cacheprovider $CORE_TESTS > "$WORK/torch-$v.tests.log" 2>&1
    summary=$(tail -1 "$WORK/torch-$v.tests.log" | sed 's/=//g; s/^ *//; s/ *$//')
    installed=$("$venv/bin/python" -c 'import torch, fairseq; print(torch.__version__, "/ fairseq", fairseq.__version__)' 2>/dev/null)
  else
    setup="FAILED: $(grep -iE 'error' "$log" | tail -1 | cut -c1-160)"
    summary="not run"
    installed="-"
  fi
  minutes=$(( ($(date +%s) - t0 + 59) / 60 ))
  echo "[compat] torch $v: setup $setup; tests: $summary (${minutes} min)"
  echo "| $v | $installed | $setup | $summary | $minutes |" > "$ROWS_DIR/torch-$v.row"
done
{
  echo "# Compatibility matrix (measured)"
  echo
  echo "\`nice -n 15 scripts/compat_matrix.sh\` on $(uname -m), Python $(python3 --version 2>&1 | cut -d" " -f2); each row from its own run (row files in results/compat/), rendered $(date -u +%Y-%m-%d)."
  echo "Each row: a fresh venv from \`scripts/setup_env.sh\` with TORCH_SPEC=torch==VERSION (the same"
  echo "fairseq-fixed 0.12.3.1 built against it, the pinned requirements), then the core subset:"
  echo "\`$CORE_TESTS\`."
  echo
  echo "| torch requested | installed | setup | core tests | minutes |"
  echo "|---|---|---|---|---:|"
  ls "$ROWS_DIR"/torch-*.row | sort -V | xargs cat
  if [ -f "$ROWS_DIR/notes.md" ]; then echo; cat "$ROWS_DIR/notes.md"; fi
} > "$OUT"
echo "[compat] wrote $OUT"
