#!/usr/bin/env bash
# The GPU check in one command (issue 56; docs/gpu.md):
#
#   bash scripts/gpu_check.sh BUNDLE OUT          # on a CUDA machine, offline
#   bash scripts/gpu_check.sh --cpu BUNDLE OUT    # the rehearsal: tiny sizes on the CPU
#
# BUNDLE is the folder scripts/build_gpu_bundle.sh makes; OUT (created) receives venv/, the
# logs, stages/*.json, stages.tsv (stage, status, rc, seconds, limit) and report.{json,md}.
# It makes a virtual environment over the machine's own torch (and numpy), installs the
# bundle with --no-index (fairseq-fixed built here from its sdist against that torch) and
# the plug-in from this checkout, then runs the stages of scripts/gpu_check.py, each under
# its own time limit, within one overall deadline. Exit status 0 when every stage passed.
#
# Environment:
#   GPU_CHECK_PYTHON      the interpreter whose torch to use (default: python3). With
#                         --system-site-packages the new venv sees its site-packages; if it
#                         is itself a venv, a .pth adds that venv's site-packages too.
#   GPU_CHECK_BASE_SITE   instead: a folder holding torch (and numpy) only, seen through a
#                         .pth, no system site-packages (what the rehearsal uses)
#   GPU_CHECK_WHEEL_CACHE where the fairseq-fixed wheel built from the bundle's sdist is kept,
#                         one folder per (sdist sha256, Python, torch) (default: OUT/wheels)
#   GPU_CHECK_DEADLINE    seconds for every stage but the report (default 450 with CUDA, so
#                         that with the report (30 s at most) the command ends within 8
#                         minutes; 2000 with --cpu)
set -uo pipefail
MODE=cuda
if [ "${1:-}" = "--cpu" ]; then MODE=cpu; shift; fi
[ $# -eq 2 ] || { echo "usage: bash scripts/gpu_check.sh [--cpu] BUNDLE OUT" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=$(cd "$1" && pwd) || { echo "gpu_check: no bundle folder $1" >&2; exit 2; }
mkdir -p "$2" && OUT=$(cd "$2" && pwd)
PYTHON=${GPU_CHECK_PYTHON:-python3}
BASE_SITE=${GPU_CHECK_BASE_SITE:-}
WHEEL_CACHE=${GPU_CHECK_WHEEL_CACHE:-$OUT/wheels}
if [ "$MODE" = cuda ]; then DEADLINE=${GPU_CHECK_DEADLINE:-450}; else DEADLINE=${GPU_CHECK_DEADLINE:-2000}; fi
unset PYTHONPATH  # the new environment sees only what is installed in it
# pip sees the bundle only: no configuration file, no PIP_* variable of this machine
for v in $(compgen -e | grep '^PIP_' || true); do unset "$v"; done
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_CONFIG_FILE=/dev/null
export GPU_CHECK_BUNDLE=$BUNDLE
VENV=$OUT/venv
VPY=$VENV/bin/python
rm -rf "$VENV" "$OUT/stages" "$OUT/logs" "$OUT/work" "$OUT/standins" "$OUT/report.json" "$OUT/report.md"
mkdir -p "$OUT/logs" "$OUT/stages" "$OUT/work"
: > "$OUT/stages.tsv"
START=$(date +%s)
FAILED=0

# stage NAME LIMIT COMMAND...: run under `timeout` with the smaller of LIMIT and the time
# left before the deadline; one line in stages.tsv; the log in logs/NAME.log
stage() {
  local name=$1 limit=$2; shift 2
  local left=$(( DEADLINE - ($(date +%s) - START) ))
  (( left < limit )) && limit=$left
  if (( limit < 5 )); then
    printf '%s\tskipped (no time left)\t0\t0\t0\n' "$name" >> "$OUT/stages.tsv"
    echo "[gpu_check] $name: skipped, the deadline ($DEADLINE s) is reached"; FAILED=1; return 1
  fi
  local t0 rc status secs
  t0=$(date +%s%N)
  GPU_CHECK_LIMIT=$limit timeout -k 10 "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
  rc=$?
  secs=$(( ($(date +%s%N) - t0) / 1000000 ))
  secs=$(printf '%d.%d' $(( secs / 1000 )) $(( secs % 1000 / 100 )))
  if (( rc == 0 )); then status=ok; elif (( rc == 124 || rc == 137 )); then status="timeout"; else status=fail; fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$secs" "$limit" >> "$OUT/stages.tsv"
  echo "[gpu_check] $name: $status in $secs s (limit $limit s)"
  if (( rc != 0 )); then FAILED=1; tail -n 25 "$OUT/logs/$name.log" | sed 's/^/    /'; fi
  return $rc
}

# ---- install: a venv over the machine's torch, the bundle with --no-index -------------------
make_venv() {
  set -euo pipefail
  if [ -n "$BASE_SITE" ]; then
    "$PYTHON" -m venv "$VENV"
    site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$BASE_SITE" > "$site/machine_torch.pth"
  else
    "$PYTHON" -m venv --system-site-packages "$VENV"
    # a venv's (or conda env's) torch: --system-site-packages sees the base interpreter's
    # site-packages only, so name the interpreter's own as well
    own=$("$PYTHON" -c 'import sys, sysconfig; p = sysconfig.get_paths(); print("\n".join({p["purelib"], p["platlib"]}) if sys.prefix != sys.base_prefix else "")')
    site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    [ -z "$own" ] || echo "$own" > "$site/machine_torch.pth"
  fi
  cd "$OUT/work"
  "$VPY" - "$MODE" <<'EOF'
import os, shutil, sys, sysconfig
import torch
try:
    import numpy
except ImportError:
    sys.exit("gpu_check: numpy is missing beside torch; the bundle leaves it to the machine "
             "(16 MB a wheel, docs/gpu.md): pip install numpy there, or download its wheel for "
             "this Python and pass its folder as a second --find-links")
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "numpy", numpy.__version__)
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device (run with --cpu for the rehearsal)")
if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
    sys.exit("gpu_check: Python.h is missing (the python3-dev package): fairseq's extensions "
             "cannot be built")
if not (shutil.which("c++") or shutil.which("g++")):
    sys.exit("gpu_check: no C++ compiler (c++/g++): fairseq's extensions cannot be built")
EOF
}

install_bundle() {
  set -euo pipefail
  PIP="$VPY -m pip"
  cd "$OUT/work"
  # the build tools first, then every other package of the bundle's list, each exactly
  # pinned, without dependencies (the list is the complete set: docs/gpu.md)
  $PIP install --no-index --find-links "$BUNDLE" --no-deps $(grep -E '^(setuptools|wheel|cython)==' "$BUNDLE/requirements-bundle.txt")
  # (PyYAML from its sdist without the libyaml extension: pure Python, no libyaml needed)
  PYYAML_FORCE_LIBYAML=0 $PIP install --no-index --find-links "$BUNDLE" --no-deps \
    --no-build-isolation -r "$BUNDLE/requirements-bundle.txt"
  # fairseq-fixed from its sdist, against this torch and numpy, once per (sdist, Python, torch)
  sdist=$(ls "$BUNDLE"/fairseq_fixed-*.tar.gz)
  key=$("$VPY" - "$sdist" <<'EOF'
import hashlib, sys, torch
h = hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:16]
print(f"{h}-cp{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__}")
EOF
)
  wheels="$WHEEL_CACHE/$key"
  if ls "$wheels"/fairseq_fixed-*.whl > /dev/null 2>&1; then
    echo "[install] fairseq-fixed: the wheel built earlier from this sdist for this Python and torch ($wheels)"
  else
    echo "[install] building fairseq-fixed from $(basename "$sdist") against torch (parallel extensions; ninja hidden, CUDA_HOME unset: no CUDA kernels)"
    tmp="$wheels.tmp.$$"; rm -rf "$tmp"; mkdir -p "$tmp/noninja"
    # setuptools builds the extensions in parallel (build_ext --parallel); torch's ninja path
    # writes one build.ninja per build folder, which parallel builds would share: hide ninja
    printf '#!/bin/sh\nexit 1\n' > "$tmp/noninja/ninja"; chmod +x "$tmp/noninja/ninja"
    printf '[build_ext]\nparallel = %s\n' "$(nproc)" > "$tmp/build_ext.cfg"
    t0=$(date +%s)
    env -u CUDA_HOME PATH="$tmp/noninja:$PATH" DIST_EXTRA_CONFIG="$tmp/build_ext.cfg" \
      $PIP wheel --no-index --find-links "$BUNDLE" --no-deps --no-build-isolation \
      -w "$tmp" "$sdist"
    echo "[install] fairseq-fixed built in $(( $(date +%s) - t0 )) s"
    rm -rf "$wheels"; mkdir -p "$wheels"; mv "$tmp"/fairseq_fixed-*.whl "$wheels"/; rm -rf "$tmp"
  fi
  $PIP install --no-index --no-deps "$wheels"/fairseq_fixed-*.whl
  # the plug-in from this checkout (editable: the stages run this tree's code)
  $PIP install --no-index --no-deps --no-build-isolation -e "$ROOT"
  # stand-ins for sklearn, scipy and lxml, which fairseq imports and the check never calls,
  # for those this machine lacks (scripts/gpu_check_standins/README.md)
  used=""
  for mod in sklearn.metrics scipy.stats lxml.etree; do
    if ! "$VPY" -c "import $mod" 2>/dev/null; then
      mkdir -p "$OUT/standins"; cp -r "$ROOT/scripts/gpu_check_standins/${mod%%.*}" "$OUT/standins/"
      used="$used ${mod%%.*}"
    fi
  done
  if [ -n "$used" ]; then
    site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$OUT/standins" > "$site/zz_gpu_check_standins.pth"
    echo "[install] stand-ins (imported by fairseq, never called here):$used"
  fi
  printf '%s\n' $used > "$OUT/standins.txt"
  "$VPY" -c "import fairseq, fairseq_shared, torch; print('[install] ok: fairseq', fairseq.__version__, 'fairseq_shared', fairseq_shared.__version__, 'torch', torch.__version__)"
}

run_stage() {
  "$VPY" "$ROOT/scripts/gpu_check.py" "$1" --device "$MODE" --out "$OUT" --limit "$GPU_CHECK_LIMIT"
}
# `timeout` runs programs, not functions: the stages are these functions in a child bash
export -f make_venv install_bundle run_stage
export MODE ROOT BUNDLE OUT PYTHON BASE_SITE WHEEL_CACHE VENV VPY

echo "[gpu_check] mode $MODE, bundle $BUNDLE, out $OUT, deadline $DEADLINE s"
if [ -f "$BUNDLE/MANIFEST.sha256" ]; then
  stage verify 30 bash -c "cd '$BUNDLE' && sha256sum --quiet -c MANIFEST.sha256" || true
fi
if [ "$MODE" = cuda ]; then
  # limits: a stage's own cap (a hang costs at most that); the estimates are in docs/gpu.md
  L_VENV=90 L_INSTALL=300 L_ENV=60 L_TRAIN=240 L_EXACT=120 L_DECODE=150 L_TESTS=150
else
  # (a cold fairseq build on a busy 2-core machine took 522 s)
  L_VENV=120 L_INSTALL=1200 L_ENV=90 L_TRAIN=420 L_EXACT=180 L_DECODE=120 L_TESTS=300
fi
if stage venv "$L_VENV" bash -c make_venv && stage install "$L_INSTALL" bash -c install_bundle; then
  cd "$OUT/work"
  stage env "$L_ENV" bash -c "run_stage env"
  stage train "$L_TRAIN" bash -c "run_stage train"
  stage exactness "$L_EXACT" bash -c "run_stage exactness"
  stage decode "$L_DECODE" bash -c "run_stage decode"
  stage tests "$L_TESTS" bash -c "run_stage tests"
fi
DEADLINE=$(( DEADLINE + 30 ))  # the report is always written
PY_REPORT=$VPY; [ -x "$VPY" ] || PY_REPORT=$PYTHON
stage report 30 "$PY_REPORT" "$ROOT/scripts/gpu_check.py" report --device "$MODE" --out "$OUT"
echo "[gpu_check] $(( $(date +%s) - START )) s in all; report: $OUT/report.md"
[ -f "$OUT/report.md" ] && cat "$OUT/report.md" | head -20
exit $FAILED
