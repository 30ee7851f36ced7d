#!/usr/bin/env bash
# Configures and builds the CPU build into ${BUILD_DIR:-build}. Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# TARGET=dsinfer builds only the executable (scripts/demo.sh); default: everything.
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" ${TARGET:+--target "$TARGET"}
