#!/usr/bin/env bash
# Build the GPU check's bundle (issue 56; docs/gpu.md): a folder of wheels and sdists that
# installs the plug-in's check with `pip install --no-index --find-links BUNDLE` into a venv
# over a machine's own torch, on Python 3.11 or 3.12 (manylinux x86_64).
#
#   bash scripts/build_gpu_bundle.sh [OUT]        # default OUT: gpu_bundle/ in this checkout
#
# Needs PyPI (pip download) and, for fairseq-fixed's sdist (its setup.py imports torch even
# to be downloaded), a Python with torch: BUILD_PYTHON (default: .venv/bin/python).
# Writes OUT/MANIFEST.sha256 (`sha256sum -c` format), OUT/bundle.json (what, why, sizes) and
# OUT/requirements-bundle.txt (what gpu_check.sh installs, --no-deps). Not committed: this
# command rebuilds it (.gitignore). A bundle already built from this same script, whose
# files still match their hashes, is kept as it is (no network).
#
# Not in the bundle, on purpose:
#   torch, numpy      the machine's own (a CUDA build of torch; numpy is 16.6 MB a wheel)
#   scikit-learn + scipy (~50 MB), lxml (5.1 MB a wheel)
#                     fairseq imports sklearn.metrics and scipy.stats, sacrebleu imports
#                     lxml.etree; nothing the check runs calls them: gpu_check.sh puts
#                     raising stand-ins (scripts/gpu_check_standins/) in their place where
#                     the machine lacks them
#   sentencepiece, sacremoses, subword-nmt, regex, matplotlib, pysword, ctranslate2,
#   transformers (+ tokenizers, safetensors, huggingface-hub), pytest-xdist, Pygments (pytest 8.3.5 imports it only to colour tracebacks)
#                     not imported by training, decoding or the core tests: the check makes
#                     its corpus without sentencepiece and never exports (the rehearsal in
#                     tests/test_gpu_bundle.py proves the list complete: it installs nothing
#                     else)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/gpu_bundle}
BUILD_PYTHON=${BUILD_PYTHON:-$ROOT/.venv/bin/python}
LIMIT_BYTES=16000000
PYTHONS="3.11 3.12"

# ---- the spec: name==version and how it is fetched --------------------------------------
#   pure    a py3-none-any wheel (one for every Python)
#   binary  one manylinux x86_64 wheel per Python in $PYTHONS
#   sdist   the source archive (no wheel exists, or it must be built against the torch)
SPEC="
setuptools==84.2.1 pure     builds fairseq-fixed, antlr4 and the plug-in (a 3.12 venv has none)
wheel==0.48.0 pure          pip wheel for fairseq-fixed
cython==3.3.1 pure          fairseq's .pyx extensions (the uncompiled Cython: 1.4 MB, not 2 x 3.4 MB)
hydra-core==1.3.2 pure      fairseq's configuration
omegaconf==2.3.0 pure       fairseq's configuration, the plug-in's
antlr4-python3-runtime==4.9.3 sdist   omegaconf's grammar (PyPI has no wheel of it)
PyYAML==6.0.4 sdist         omegaconf (built pure-Python, PYYAML_FORCE_LIBYAML=0: 0.14 MB, not 2 x 0.84 MB of wheels)
bitarray==3.12.3 binary     fairseq.data imports it
packaging==26.4 pure        hydra, fairseq
tqdm==4.70.1 pure           fairseq's progress bars
sacrebleu==2.6.0 pure       fairseq imports it (fairseq.scoring)
portalocker==4.4.2 pure     sacrebleu imports it
tabulate==0.10.0 pure       sacrebleu imports it
colorama==0.4.6 pure        sacrebleu imports it
pytest==8.3.5 pure          the core tests (not requirements.txt's 9.2.0: pytest >= 8.4 imports Pygments, 1.25 MB, at start)
pluggy==1.7.0 pure          pytest
iniconfig==2.3.1 pure       pytest
fairseq-fixed==0.12.3.1 sdist   built on the machine against its torch (gpu_check.sh)
"

if [ -f "$OUT/bundle.json" ] && [ -f "$OUT/MANIFEST.sha256" ]; then
  want=$(sha256sum "$0" | cut -d' ' -f1)
  have=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['spec_sha256'])" "$OUT/bundle.json" 2>/dev/null || true)
  if [ "$want" = "$have" ] && (cd "$OUT" && sha256sum --quiet -c MANIFEST.sha256 2>/dev/null); then
    echo "[bundle] $OUT is up to date (built by this script; every file matches MANIFEST.sha256)"
    exit 0
  fi
fi

TMP="$OUT.tmp.$$"
rm -rf "$TMP"; mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
# PyPI only (not this machine's local mirrors or PIP_* settings), so every hash is PyPI's
for v in $(compgen -e | grep '^PIP_' | grep -v '^PIP_CERT$' || true); do unset "$v"; done
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
INDEX=(--index-url https://pypi.org/simple)
DL=(python3 -m pip download -q --no-deps "${INDEX[@]}" -d "$TMP")

while read -r req kind _; do
  [ -n "$req" ] || continue
  echo "[bundle] $req ($kind)"
  case "$kind" in
    pure)
      "${DL[@]}" --only-binary=:all: --implementation py --abi none --platform any \
        --python-version 3.11 "$req" ;;
    binary)
      for py in $PYTHONS; do
        "${DL[@]}" --only-binary=:all: --implementation cp --python-version "$py" \
          --abi "cp${py/./}" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
          --platform manylinux_2_28_x86_64 "$req"
      done ;;
    sdist)
      if [[ "$req" == fairseq-fixed* ]]; then
        # its setup.py imports torch to be read: run pip with a Python that has torch
        "$BUILD_PYTHON" -m pip download -q --no-deps "${INDEX[@]}" -d "$TMP" \
          --no-binary fairseq-fixed --no-build-isolation "$req"
      else
        "${DL[@]}" --no-binary "${req%%==*}" "$req"
      fi ;;
  esac
done <<< "$SPEC"

# what gpu_check.sh installs with --no-deps (fairseq-fixed apart: it is built first)
echo "$SPEC" | awk 'NF && $1 !~ /^fairseq-fixed/ {print $1}' > "$TMP/requirements-bundle.txt"
(cd "$TMP" && ls | sort | xargs sha256sum) > "$OUT.manifest.$$"
mv "$OUT.manifest.$$" "$TMP/MANIFEST.sha256.part"

python3 - "$TMP" "$0" "$LIMIT_BYTES" "$SPEC" <<'EOF'
import hashlib, json, os, sys, time
folder, script, limit, spec = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
files = {}
for line in open(os.path.join(folder, "MANIFEST.sha256.part")):
    digest, name = line.split(None, 1)
    name = name.strip()
    files[name] = {"sha256": digest, "bytes": os.path.getsize(os.path.join(folder, name))}
total = sum(f["bytes"] for f in files.values())
packages = []
for line in spec.strip().splitlines():
    req, kind, why = line.split(None, 2)
    packages.append({"requirement": req, "kind": kind, "why": why.strip()})
info = {"spec_sha256": hashlib.sha256(open(script, "rb").read()).hexdigest(),
        "built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "pythons": ["3.11", "3.12"], "platform": "manylinux x86_64",
        "total_bytes": total, "limit_bytes": limit, "packages": packages, "files": files,
        "install": "bash scripts/gpu_check.sh BUNDLE OUT (docs/gpu.md)"}
json.dump(info, open(os.path.join(folder, "bundle.json"), "w"), indent=1)
for name, f in sorted(files.items(), key=lambda kv: -kv[1]["bytes"]):
    print(f"  {f['bytes'] / 1e6:7.3f} MB  {name}")
print(f"[bundle] {len(files)} files, {total / 1e6:.2f} MB ({total / 2**20:.2f} MiB); limit {limit / 1e6:.0f} MB")
if total > limit:
    sys.exit(f"[bundle] too big: {total} bytes > {limit}")
EOF
mv "$TMP/MANIFEST.sha256.part" "$TMP/MANIFEST.sha256"
all=$(cat "$TMP"/* | wc -c)  # with MANIFEST.sha256 and bundle.json
echo "[bundle] the folder: $all bytes"
(( all <= LIMIT_BYTES )) || { echo "[bundle] too big: $all bytes > $LIMIT_BYTES"; exit 1; }
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
echo "[bundle] $OUT (verify: cd $OUT && sha256sum -c MANIFEST.sha256)"
