#!/usr/bin/env bash
# The README's second install route, checked: "add it to your fairseq".
# A fresh virtual environment that already holds torch and fairseq (those of BASE_VENV, seen
# through a .pth file, as a researcher's GPU environment would hold them), then the wheel built
# from the checkout (what `pip install .[export]` installs; the harness is not in it)
# must give every console script, and fairseq-train must take the installed plug-in with
# --user-dir, from the environment's site-packages alone.
# Usage: scripts/check_install.sh WORK_DIR [DATA_BIN]   (BASE_VENV defaults to .venv)
set -euo pipefail
WORK=${1:?usage: scripts/check_install.sh WORK_DIR [DATA_BIN]}
DATA=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_VENV=${BASE_VENV:-$ROOT/.venv}
BASE_PY=$BASE_VENV/bin/python
unset PYTHONPATH  # the fresh environment sees only what is installed in it
SCRIPTS="export convert-sharing learn-sharing learn-policy convert-policy count-params time-generate average audit distill"

PYTHON=$("$BASE_PY" -c 'import sys; print(sys._base_executable)')
SITE=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$WORK/venv"
mkdir -p "$WORK"
cd "$WORK"  # not the source tree: `python -c` imports from the working directory
"$PYTHON" -m venv --without-pip "$WORK/venv"
NEW_SITE=$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$SITE" > "$NEW_SITE/base_environment.pth"  # torch, fairseq and the rest, already there
"$WORK/venv/bin/python" -c "import torch, fairseq; print('[check_install] fresh venv sees torch', torch.__version__, 'fairseq', fairseq.__version__)"
! "$WORK/venv/bin/python" -c "import fairseq_shared" 2>/dev/null || { echo "fairseq_shared importable before the install"; exit 1; }

# pip of the base environment: the wheel (built from a copy of what it packages, so no build/
# folder is left in the checkout), then installed into the fresh environment; --no-index:
# every dependency must already be there (a download would mean one the route does not need)
PIP="$BASE_PY -m pip --disable-pip-version-check"
rm -rf "$WORK/src" "$WORK/wheel"
mkdir -p "$WORK/src"
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/fairseq_shared" "$WORK/src/"
$PIP wheel -q --no-deps --no-build-isolation --no-index -w "$WORK/wheel" "$WORK/src"
WHEEL=$(ls "$WORK"/wheel/fairseq_shared-*.whl)
# the wheel ships the plug-in alone: no harness, no tests, no scripts
TOP=$("$BASE_PY" -c 'import sys, zipfile; print(" ".join(sorted({n.split("/")[0] for n in zipfile.ZipFile(sys.argv[1]).namelist()})))' "$WHEEL")
[ "$TOP" = "fairseq_shared fairseq_shared-0.1.0.dist-info" ] || { echo "the wheel holds $TOP"; exit 1; }
echo "[check_install] the wheel holds: $TOP"
$PIP --python "$WORK/venv/bin/python" install -q --no-index "$WHEEL[export]"
for s in $SCRIPTS; do
  [ -x "$WORK/venv/bin/fairseq-shared-$s" ] || { echo "missing console script fairseq-shared-$s"; exit 1; }
done
# every script's --help, then the package's directory, in one process of the fresh environment
# (a process a script would pay the import of torch and fairseq each time)
USER_DIR=$("$WORK/venv/bin/python" - $SCRIPTS <<'EOF'
import contextlib, io, os, runpy, sys
for s in sys.argv[1:]:
    sys.argv = [os.path.join(sys.prefix, "bin", f"fairseq-shared-{s}"), "--help"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (0, None):
            sys.exit(f"fairseq-shared-{s} --help failed")
import fairseq_shared
print(os.path.dirname(fairseq_shared.__file__))
EOF
)
echo "[check_install] console scripts: $(cd "$WORK/venv/bin" && ls fairseq-shared-* | tr '\n' ' ')"
[ "$USER_DIR" = "$NEW_SITE/fairseq_shared" ] || { echo "the installed plug-in is at $USER_DIR, not in $NEW_SITE"; exit 1; }
if [ -n "$DATA" ]; then
  OMP_NUM_THREADS=1 "$WORK/venv/bin/python" -m fairseq_cli.train "$DATA" --user-dir "$USER_DIR" \
      --arch transformer_cycle_rev --encoder-layers 2 --decoder-layers 2 \
      --encoder-unique-layers 1 --decoder-unique-layers 1 --encoder-embed-dim 16 \
      --decoder-embed-dim 16 --encoder-ffn-embed-dim 16 --decoder-ffn-embed-dim 16 \
      --encoder-attention-heads 2 --decoder-attention-heads 2 --share-all-embeddings \
      --optimizer adam --lr 0.001 --max-tokens 500 --max-update 2 --cpu --no-save \
      --no-progress-bar --log-interval 1 --num-workers 0 > "$WORK/train.log" 2>&1 \
    || { tail -20 "$WORK/train.log"; exit 1; }
  grep -q "encoder: 2 layers over 1 parameter sets" "$WORK/train.log" \
    && grep -q "num_updates=2" "$WORK/train.log" || { tail -20 "$WORK/train.log"; exit 1; }
  echo "[check_install] fairseq-train --user-dir $USER_DIR: 2 updates of a shared model"
fi
echo "[check_install] ok"
