#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine needs to build and test dsinfer (CPU build).
# Idempotent; run as root (or with sudo available).
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config ccache git curl python3 python3-venv
      nlohmann-json3-dev libcli11-dev libpcre2-dev libopenblas-dev libgtest-dev
      libboost-dev libboost-system-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: system packages present"
