#!/usr/bin/env bash
# Packs what the GPU machine needs into DEST (default /work/main/.carry, an ignored folder of
# the checkout that the device tool sends): bin.tar.xz with the prebuilt binaries from
# build-cuda, the fixtures, the real DeepSeek-V3 config and shared libraries the target may
# lack, plus the scripts. On the GPU machine: bash .carry/scripts/gpu_run.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-/work/main/.carry}
B="$ROOT/build-cuda"
STAGE=$(mktemp -d)
mkdir -p "$STAGE/bin/lib" "$STAGE/bin/data/deepseek-v3"
# (The CPU test binary only with CARRY_CPU_TESTS=1: gpu_check.sh runs it when present; the
# device tool's 64 MiB limit on the tree plus the carry leaves little room for it.)
# CARRY_BINS: the binaries to pack (default both; e.g. CARRY_BINS=dsinfer for a bench-only call).
for f in ${CARRY_BINS:-dsinfer dsinfer_cuda_tests} ${CARRY_CPU_TESTS:+dsinfer_tests}; do [ -x "$B/$f" ] && cp "$B/$f" "$STAGE/bin/"; done
strip "$STAGE"/bin/dsinfer* 2>/dev/null || true
# CARRY_DATA=0 leaves the fixtures out (~6 MB compressed): the device tool refuses a tree plus carry
# over 64 MiB, and the checkout itself is ~32 MiB (session 19); op tests and benches do not need them.
[ "${CARRY_DATA:-1}" = 0 ] || cp -r "$ROOT"/tests/data/* "$STAGE/bin/data/"
cp "$ROOT/../shared/models/deepseek-v3/config.json" "$STAGE/bin/data/deepseek-v3/"
mkdir -p "$STAGE/bin/data/deepseek-v2-lite"
cp "$ROOT/../shared/models/deepseek-v2-lite/config.json" "$STAGE/bin/data/deepseek-v2-lite/"
# The conversation trace for the replay (bench serve --dataset-name trace), when present.
[ -f "$ROOT/../shared/traces/mooncake_conversation_trace.jsonl" ] && mkdir -p "$STAGE/bin/data/traces" &&
  cp "$ROOT/../shared/traces/mooncake_conversation_trace.jsonl" "$STAGE/bin/data/traces/"
cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$STAGE/bin/lib/"
git -C "$ROOT" rev-parse --short HEAD >"$STAGE/bin/COMMIT"
rm -rf "$DEST"
mkdir -p "$DEST/scripts"
tar -C "$STAGE" -cf - bin | xz -T2 -6 >"$DEST/bin.tar.xz"
cp "$ROOT"/scripts/gpu_check.sh "$ROOT"/scripts/gpu_run.sh "$ROOT"/scripts/gpu_bench_kernels.sh "$DEST/scripts/"
rm -rf "$STAGE"
du -sh "$DEST"
