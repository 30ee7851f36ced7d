#!/usr/bin/env bash
# On the GPU machine: unpacks .carry/bin.tar.xz (see gpu_carry.sh) and runs gpu_check.sh on it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p /tmp/dsinfer_gpu && xz -dc "$HERE/bin.tar.xz" | tar -C /tmp/dsinfer_gpu -xf - || exit 1
bash "$HERE/scripts/gpu_check.sh" /tmp/dsinfer_gpu/bin
