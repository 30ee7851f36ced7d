#!/usr/bin/env bash
# On the GPU machine (one device call): the sm_90a wgmma MLA decode kernel (mla_decode_sm90.cu),
# both variants (MlaDecodeParams::sm90_variant: 0 the verified kernel, 1 "seesaw")
# - its op tests (CudaMlaDecodeSm90.*: vs the CPU op and vs the CUDA-core emulation of its
#   rounding and split plan), variant 0 and variant 1 in separate processes
#   (DS_TEST_SM90_VARIANTS), so a hang of the seesaw kernel does not hide variant 0's results;
#   then the existing MLA decode op tests (CudaMlaDecode.*); then, unless the variant-0 tests
#   timed out (a hung kernel), CudaRunner.DummyV3DecodeSm90MatchEmulation (the whole dummy-V3
#   model with the option on) and, unless the seesaw tests timed out,
#   CudaRunner.DummyV3DecodeSm90SeesawMatchEmulation; then `dsinfer bench kernels --only
#   mla_sm90` (the 128-head FlashMLA anchors: both variants vs the default tensor-core path in
#   the same run; the seesaw variant skipped, DS_BENCH_SKIP_SM90_SEESAW=1, if its tests
#   timed out or failed).
# Binaries: prebuilt here, packed into this script's folder by scripts/gpu_carry.sh
# (/work/wt/DEVICE_RULES.md):
#   bash scripts/gpu_carry.sh /work/main/build-gpu-mladec3 && cp scripts/gpu_mla_decode_sm90.sh /work/main/build-gpu-mladec3/
#   run: carry ["build-gpu-mladec3"], command "bash build-gpu-mladec3/gpu_mla_decode_sm90.sh", timeout_s 590
# Results under $OUT: summary.txt, sm90_tests_v0.log, sm90_tests_v1.log, mla_tests.log,
# runner_tests*.log, bench.log, kernels.json/.md.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/mla_sm90_out}
mkdir -p /tmp/g "$OUT" && xz -dc "$D/bin.tar.xz" | tar -C /tmp/g -xf -
export LD_LIBRARY_PATH=/tmp/g/bin/lib:/usr/local/cuda/lib64:$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib | head -1)
export DS_TEST_DATA_DIR=/tmp/g/bin/data DS_BINARY=/tmp/g/bin/dsinfer
S=$OUT/summary.txt
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit $(cat /tmp/g/bin/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$S" 2>&1
hung() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
t=$(date +%s)
DS_TEST_SM90_VARIANTS=0 timeout 100 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' \
  > "$OUT/sm90_tests_v0.log" 2>&1
rc_v0=$?
echo "sm90 op tests, variant 0, rc=$rc_v0 in $(( $(date +%s) - t )) s" >> "$S"
t=$(date +%s)
DS_TEST_SM90_VARIANTS=1 timeout 100 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' \
  > "$OUT/sm90_tests_v1.log" 2>&1
rc_v1=$?
echo "sm90 op tests, variant 1 (seesaw), rc=$rc_v1 in $(( $(date +%s) - t )) s" >> "$S"
t=$(date +%s)
timeout 90 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaMlaDecode.*' > "$OUT/mla_tests.log" 2>&1
echo "existing mla decode op tests rc=$? in $(( $(date +%s) - t )) s" >> "$S"
if ! hung "$rc_v0"; then
  t=$(date +%s)  # the whole dummy-V3 model with the option on vs the emulation of its plan
  timeout 80 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaRunner.DummyV3DecodeSm90MatchEmulation' \
    > "$OUT/runner_tests.log" 2>&1
  echo "runner sm90 test rc=$? in $(( $(date +%s) - t )) s" >> "$S"
fi
if ! hung "$rc_v1"; then
  t=$(date +%s)
  timeout 80 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaRunner.DummyV3DecodeSm90SeesawMatchEmulation' \
    > "$OUT/runner_tests_seesaw.log" 2>&1
  echo "runner sm90 seesaw test rc=$? in $(( $(date +%s) - t )) s" >> "$S"
fi
grep -hE "^\[ +(OK|FAILED) +\]|^\[  PASSED|^\[  FAILED|FAIL$|^\[info\]|sm90" "$OUT"/sm90_tests_v*.log "$OUT/mla_tests.log" \
  "$OUT"/runner_tests*.log 2>/dev/null | grep -v "^\[metric\]" >> "$S"
grep -hE "\[metric\] op=mla_decode_sm90" "$OUT"/sm90_tests_v*.log >> "$S"
if ! hung "$rc_v0"; then
  skip_ss=0
  [ "$rc_v1" -ne 0 ] && skip_ss=1
  echo "bench: seesaw variant skipped=$skip_ss" >> "$S"
  t=$(date +%s)
  DS_BENCH_SKIP_SM90_SEESAW=$skip_ss timeout 110 /tmp/g/bin/dsinfer bench kernels --only mla_sm90 --budget-s 85 \
    --out "$OUT" --commit "$(cat /tmp/g/bin/COMMIT)" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? in $(( $(date +%s) - t )) s" >> "$S"
else
  echo "bench skipped: the variant-0 sm90 tests timed out (hung kernel?)" >> "$S"
fi
cat "$S"
sed -n '/sm_90a wgmma kernel/,/^$/p' "$OUT/kernels.md" 2>/dev/null
