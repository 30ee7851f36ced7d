#!/usr/bin/env bash
# On the GPU machine (one device call): the sm_90a wgmma MLA decode kernel (mla_decode_sm90.cu)
# - its op tests (CudaMlaDecodeSm90.*: vs the CPU op and vs the CUDA-core emulation of its
#   rounding and split plan), then the existing MLA decode op tests (CudaMlaDecode.*: the
#   emulation kernel changed to serve 64-key softmax tiles), then, unless the sm90 tests timed
#   out (a hung kernel), CudaRunner.DummyV3DecodeSm90MatchEmulation (the whole dummy-V3 model
#   with the option on) and `dsinfer bench kernels --only mla_sm90` (the 128-head FlashMLA
#   anchors: sm90 kernel vs the default tensor-core path in the same run).
# Binaries: prebuilt here, packed into this script's folder by scripts/gpu_carry.sh
# (/work/wt/DEVICE_RULES.md):
#   bash scripts/gpu_carry.sh /work/main/build-gpu-mladec2 && cp scripts/gpu_mla_decode_sm90.sh /work/main/build-gpu-mladec2/
#   run: carry ["build-gpu-mladec2"], command "bash build-gpu-mladec2/gpu_mla_decode_sm90.sh", timeout_s 420
# Results under $OUT: summary.txt, sm90_tests.log, mla_tests.log, bench.log, kernels.json/.md.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/mla_sm90_out}
mkdir -p /tmp/g "$OUT" && xz -dc "$D/bin.tar.xz" | tar -C /tmp/g -xf -
export LD_LIBRARY_PATH=/tmp/g/bin/lib:/usr/local/cuda/lib64:$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib | head -1)
export DS_TEST_DATA_DIR=/tmp/g/bin/data DS_BINARY=/tmp/g/bin/dsinfer
S=$OUT/summary.txt
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit $(cat /tmp/g/bin/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$S" 2>&1
t=$(date +%s)
timeout 120 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > "$OUT/sm90_tests.log" 2>&1
rc_sm90=$?
echo "sm90 op tests rc=$rc_sm90 in $(( $(date +%s) - t )) s" >> "$S"
t=$(date +%s)
timeout 90 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaMlaDecode.*' > "$OUT/mla_tests.log" 2>&1
echo "existing mla decode op tests rc=$? in $(( $(date +%s) - t )) s" >> "$S"
if [ "$rc_sm90" -ne 124 ] && [ "$rc_sm90" -ne 137 ]; then
  t=$(date +%s)  # the whole dummy-V3 model with the option on vs the emulation of its plan
  timeout 90 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaRunner.DummyV3DecodeSm90MatchEmulation' \
    > "$OUT/runner_tests.log" 2>&1
  echo "runner sm90 test rc=$? in $(( $(date +%s) - t )) s" >> "$S"
fi
grep -hE "^\[ +(OK|FAILED) +\]|^\[  PASSED|^\[  FAILED|FAIL$|^\[info\]|sm90" "$OUT/sm90_tests.log" "$OUT/mla_tests.log" \
  "$OUT/runner_tests.log" 2>/dev/null | grep -v "^\[metric\]" >> "$S"
grep -hE "\[metric\] op=mla_decode_sm90" "$OUT/sm90_tests.log" >> "$S"
if [ "$rc_sm90" -ne 124 ] && [ "$rc_sm90" -ne 137 ]; then
  t=$(date +%s)
  timeout 80 /tmp/g/bin/dsinfer bench kernels --only mla_sm90 --budget-s 60 --out "$OUT" \
    --commit "$(cat /tmp/g/bin/COMMIT)" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? in $(( $(date +%s) - t )) s" >> "$S"
else
  echo "bench skipped: the sm90 tests timed out (hung kernel?)" >> "$S"
fi
cat "$S"
sed -n '/sm_90a wgmma kernel/,/^$/p' "$OUT/kernels.md" 2>/dev/null
