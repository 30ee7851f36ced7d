#!/usr/bin/env bash
# Fetches the CUTLASS headers (a header-only dependency of the CUDA build's sm_90a grouped GEMM,
# src/backend/cuda/grouped_gemm_sm90.cu) from the pinned PyPI wheel `nvidia-cutlass` into
# third_party/cutlass (git-ignored; never committed). CMake finds them there (DS_CUTLASS_DIR);
# without them the CUDA build still works, without the sm_90a grouped GEMM. The CPU build never
# needs them.
#   bash scripts/get_cutlass.sh [DEST]     (DEST default: third_party/cutlass)
# Result: DEST/include (cutlass/, cute/) and DEST/tools/util/include.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.2.0.0
SHA256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
DEST=${1:-third_party/cutlass}
if [ -f "$DEST/include/cutlass/cutlass.h" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  echo "CUTLASS $VERSION already in $DEST"; exit 0
fi
PY=${PYTHON:-python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PY" -m pip download --no-deps --only-binary=:all: -d "$TMP" "nvidia-cutlass==$VERSION" >/dev/null
WHL=$(ls "$TMP"/nvidia_cutlass-"$VERSION"-*.whl)
GOT=$(sha256sum "$WHL" | cut -d' ' -f1)
echo "nvidia-cutlass $VERSION: sha256 $GOT"
if [ "$GOT" != "$SHA256" ]; then
  echo "checksum mismatch (expected $SHA256)" >&2; exit 1
fi
"$PY" - "$WHL" "$TMP/x" <<'PYEOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith(("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/", "cutlass_library/source/LICENSE")):
            z.extract(n, sys.argv[2])
PYEOF
rm -rf "$DEST"
mkdir -p "$DEST/tools/util"
mv "$TMP/x/cutlass_library/source/include" "$DEST/include"
mv "$TMP/x/cutlass_library/source/tools/util/include" "$DEST/tools/util/include"
cp "$TMP"/x/cutlass_library/source/LICENSE* "$DEST/" 2>/dev/null || true
echo "$VERSION" > "$DEST/VERSION"
echo "CUTLASS $VERSION headers in $DEST"
