#!/usr/bin/env bash
# System packages for the offline Spanish-English Bible corpus: the SWORD modules spaRV1909eb
# (Debian package sword-text-sparv) and engWEB2015eb (sword-text-web). (diatheke is handy for looking, not needed.)
# Present: exit 0 quietly. Missing and root on Debian: apt-get update once, then install,
# saying so. Missing and not root (or no apt-get): print the exact command, exit 1.
set -euo pipefail
SWORD=${SWORD_PATH:-/usr/share/sword}
PKGS=(sword-text-sparv sword-text-web)

missing=0
for mod in spaRV1909eb engWEB2015eb; do
  [ -d "$SWORD/modules/texts/ztext/$mod" ] || missing=1
done
if [ "$missing" = 0 ]; then
  echo "[sysdeps] SWORD modules spaRV1909eb and engWEB2015eb present"
  exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[sysdeps] the SWORD Bible modules are missing under $SWORD. Install them with:" >&2
  echo "    sudo apt-get update && sudo apt-get install -y ${PKGS[*]}" >&2
  exit 1
fi

echo "[sysdeps] installing Debian packages: ${PKGS[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${PKGS[@]}"
for mod in spaRV1909eb engWEB2015eb; do
  if [ ! -d "$SWORD/modules/texts/ztext/$mod" ]; then
    echo "[sysdeps] $mod still missing under $SWORD after installing ${PKGS[*]}" >&2
    exit 1
  fi
done
echo "[sysdeps] installed ${PKGS[*]}"
