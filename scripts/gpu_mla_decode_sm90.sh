#!/usr/bin/env bash
# On the GPU machine (one device call): the sm_90a wgmma MLA decode kernel (mla_decode_sm90.cu),
# all variants (MlaDecodeParams::sm90_variant: 0 the verified kernel, 1 / 2 "seesaw" with an
# early / late ring-stage release; 1 and 2 not yet verified on the GPU when this was written)
# - its op tests (CudaMlaDecodeSm90.*: vs the CPU op, vs the CUDA-core emulation of its
#   rounding and split plan, variants 1-2 also vs variant 0), one process per variant
#   (DS_TEST_SM90_VARIANTS), so a hang of one variant does not hide the others' results;
# - the existing MLA decode op tests (CudaMlaDecode.*);
# - unless that variant's op tests timed out (a hung kernel): CudaRunner.DummyV3DecodeSm90MatchEmulation
#   (variant 0) and CudaRunner.DummyV3DecodeSm90SeesawMatchEmulation (variant 1): the whole
#   dummy-V3 model with the option on vs the emulation of its plan;
# - unless variant 0's tests timed out: `dsinfer bench kernels --only mla_sm90` (the 128-head
#   FlashMLA anchors: every variant vs the default tensor-core path in the same run; a seesaw
#   variant whose op tests failed or timed out is not timed, DS_BENCH_SKIP_SM90_SEESAW).
# Binaries: prebuilt here, packed into this script's folder by scripts/gpu_carry.sh
# (/work/wt/DEVICE_RULES.md):
#   bash scripts/gpu_carry.sh /work/main/build-gpu-mladec3 && cp scripts/gpu_mla_decode_sm90.sh /work/main/build-gpu-mladec3/
#   run: carry ["build-gpu-mladec3"], command "bash build-gpu-mladec3/gpu_mla_decode_sm90.sh", timeout_s 600
# Worst case (every step at its time limit) ~580 s; a passing run is far shorter.
# Results under $OUT: summary.txt, sm90_tests_v{0,1,2}.log, mla_tests.log, runner_tests*.log,
# bench.log, kernels.json/.md.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/mla_sm90_out}
mkdir -p /tmp/g "$OUT" && xz -dc "$D/bin.tar.xz" | tar -C /tmp/g -xf -
export LD_LIBRARY_PATH=/tmp/g/bin/lib:/usr/local/cuda/lib64:$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib | head -1)
export DS_TEST_DATA_DIR=/tmp/g/bin/data DS_BINARY=/tmp/g/bin/dsinfer
S=$OUT/summary.txt
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit $(cat /tmp/g/bin/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$S" 2>&1
hung() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
declare -a rc
for v in 0 1 2; do
  t=$(date +%s)
  DS_TEST_SM90_VARIANTS=$v timeout 90 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' \
    > "$OUT/sm90_tests_v$v.log" 2>&1
  rc[$v]=$?
  echo "sm90 op tests, variant $v, rc=${rc[$v]} in $(( $(date +%s) - t )) s" >> "$S"
done
t=$(date +%s)
timeout 60 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaMlaDecode.*' > "$OUT/mla_tests.log" 2>&1
echo "existing mla decode op tests rc=$? in $(( $(date +%s) - t )) s" >> "$S"
if ! hung "${rc[0]}"; then
  t=$(date +%s)  # the whole dummy-V3 model with the option on vs the emulation of its plan
  timeout 60 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaRunner.DummyV3DecodeSm90MatchEmulation' \
    > "$OUT/runner_tests.log" 2>&1
  echo "runner sm90 test (variant 0) rc=$? in $(( $(date +%s) - t )) s" >> "$S"
fi
if ! hung "${rc[1]}"; then
  t=$(date +%s)
  timeout 60 /tmp/g/bin/dsinfer_cuda_tests --gtest_filter='CudaRunner.DummyV3DecodeSm90SeesawMatchEmulation' \
    > "$OUT/runner_tests_seesaw.log" 2>&1
  echo "runner sm90 seesaw test (variant 1) rc=$? in $(( $(date +%s) - t )) s" >> "$S"
fi
grep -hE "^\[ +(OK|FAILED) +\]|^\[  PASSED|^\[  FAILED|FAIL$|^\[info\]|sm90" "$OUT"/sm90_tests_v*.log "$OUT/mla_tests.log" \
  "$OUT"/runner_tests*.log 2>/dev/null | grep -v "^\[metric\]" >> "$S"
grep -hE "\[metric\] op=mla_decode_sm90" "$OUT"/sm90_tests_v*.log >> "$S"
if ! hung "${rc[0]}"; then
  skip_ss=""
  [ "${rc[1]}" -ne 0 ] && skip_ss="${skip_ss}1"
  [ "${rc[2]}" -ne 0 ] && skip_ss="${skip_ss}2"
  echo "bench: seesaw variants not timed: '${skip_ss}'" >> "$S"
  t=$(date +%s)
  DS_BENCH_SKIP_SM90_SEESAW=$skip_ss timeout 130 /tmp/g/bin/dsinfer bench kernels --only mla_sm90 --budget-s 100 \
    --out "$OUT" --commit "$(cat /tmp/g/bin/COMMIT)" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? in $(( $(date +%s) - t )) s" >> "$S"
else
  echo "bench skipped: the variant-0 sm90 tests timed out (hung kernel?)" >> "$S"
fi
cat "$S"
sed -n '/sm_90a wgmma kernel/,/^$/p' "$OUT/kernels.md" 2>/dev/null
