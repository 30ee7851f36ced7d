#!/usr/bin/env bash
# On the GPU machine (one device call): MLA decode op tests, the CudaRunner tests, and the MLA
# decode part of `dsinfer bench kernels` (anchors with before/after + the sweep), on the
# prebuilt binaries that scripts/gpu_carry.sh packed into this folder. Results under $OUT.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/mladec_out}
mkdir -p /tmp/g "$OUT" && xz -dc "$D/bin.tar.xz" | tar -C /tmp/g -xf -
export LD_LIBRARY_PATH=/tmp/g/bin/lib:/usr/local/cuda/lib64:$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib | head -1)
export DS_TEST_DATA_DIR=/tmp/g/bin/data DS_BINARY=/tmp/g/bin/dsinfer
S=$OUT/summary.txt
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit $(cat /tmp/g/bin/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$S" 2>&1
t=$(date +%s)
timeout 75 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaMlaDecode*' > "$OUT/mla_tests.log" 2>&1
echo "mla op tests rc=$? in $(( $(date +%s) - t )) s" >> "$S"
t=$(date +%s)
timeout 45 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaRunner.*' > "$OUT/runner_tests.log" 2>&1
echo "runner tests rc=$? in $(( $(date +%s) - t )) s" >> "$S"
grep -hE "^\[ +(OK|FAILED) +\]|^\[  PASSED|^\[  FAILED|FAIL$" "$OUT/mla_tests.log" "$OUT/runner_tests.log" >> "$S"
t=$(date +%s)
timeout 100 /tmp/g/bin/dsinfer bench kernels --only mla_anchors mla_sweep --budget-s 85 --out "$OUT" \
  --commit "$(cat /tmp/g/bin/COMMIT)" > "$OUT/bench.log" 2>&1
echo "bench rc=$? in $(( $(date +%s) - t )) s" >> "$S"
cat "$S"
sed -n '/MLA decode vs FlashMLA/,/All figures/p' "$OUT/kernels.md" 2>/dev/null
