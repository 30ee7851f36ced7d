#!/usr/bin/env bash
# sm_90a CUTLASS grouped GEMM (branch cutlass): correctness + benchmark in one GPU call.
#
# Here (no GPU):   bash scripts/gpu_cutlass.sh pack DEST
#   packs build-cuda's binaries with scripts/gpu_carry.sh into DEST (an ignored folder of the
#   checkout the device tool sends, e.g. /work/main/build-gpu-cutlass) and copies this script
#   there; then `run` with carry ["build-gpu-cutlass"] and `bash build-gpu-cutlass/gpu_cutlass.sh run`.
# There (GPU):     bash DEST/gpu_cutlass.sh run      (logs under $OUT)
#   1. nvidia-smi;
#   2. CudaGroupedGemmSm90.* (new op tests), with the existing grouped GEMM / skinny / MoE
#      expert op tests in the background;
#   3. CudaRunner.* (fixtures vs golden with the sm_90a expert GEMMs on by default, dummy V3,
#      graphs);
#   4. `dsinfer bench kernels --only moe_prefill` (ceilings + the expert GEMMs at prefill sizes
#      on every kernel);
#   5. V2-Lite (dummy bf16, 27 layers) prefill of 8192 tokens through `dsinfer generate`. Note:
#      generate builds its runner options itself and reads neither DS_SM90_GROUPED_GEMM nor
#      DS_CUDA_PROFILE, so both runs use the default (sm_90a on): not an A/B (run 2026-11-29).
#   TOTAL_S (default 285) bounds the whole run.
set -uo pipefail
MODE=${1:-run}
if [ "$MODE" = pack ]; then
  ROOT=$(cd "$(dirname "$0")/.." && pwd)
  DEST=${2:?usage: gpu_cutlass.sh pack DEST}
  bash "$ROOT/scripts/gpu_carry.sh" "$DEST" || exit 1
  cp "$0" "$DEST/gpu_cutlass.sh"
  du -sh "$DEST"/*
  exit 0
fi
CARRY=$(cd "$(dirname "$0")" && pwd)
T_START=$(date +%s)
TOTAL_S=${TOTAL_S:-285}
OUT=${OUT:-/tmp/gpu_cutlass}
mkdir -p "$OUT"
left() { echo $(( TOTAL_S - ($(date +%s) - T_START) )); }
lim() { local l; l=$(left); l=$(( l - ${2:-0} )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
BIN=/tmp/cutlass_g/bin
rm -rf /tmp/cutlass_g && mkdir -p /tmp/cutlass_g && xz -dc "$CARRY/bin.tar.xz" | tar -C /tmp/cutlass_g -xf - || { echo "unpack failed"; exit 1; }
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR="$BIN/data" DS_BINARY="$BIN/dsinfer"
COMMIT=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
count() {
  echo "$(grep -c '^\[       OK' "$1") ok, $(grep -c '^\[  FAILED  \].*ms)' "$1") failed, $(grep -c '^\[  SKIPPED' "$1") skipped; metrics $(grep -c ' PASS$' "$1") pass, $(grep -c ' FAIL$' "$1") fail"
}

note "== gpu_cutlass $(date -u +%FT%TZ) commit $COMMIT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$SUMMARY"

# 2. Existing op tests in the background; the new op tests in the foreground.
OPENBLAS_NUM_THREADS=6 OMP_NUM_THREADS=6 timeout "$(lim 110)" "$BIN/dsinfer_cuda_tests" --gtest_color=no \
  --gtest_filter='CudaGroupedGemm.*:CudaSkinnyGemm.*:CudaMoeExperts.*:CudaSiluAndMul.*:CudaFp8Quant.*' >"$OUT/existing_ops.log" 2>&1 &
BG=$!
t0=$(date +%s)
OPENBLAS_NUM_THREADS=10 OMP_NUM_THREADS=10 timeout "$(lim 100)" "$BIN/dsinfer_cuda_tests" --gtest_color=no \
  --gtest_filter='CudaGroupedGemmSm90.*' >"$OUT/sm90_tests.log" 2>&1
rc=$?
note "sm90 op tests: rc=$rc ($(( $(date +%s) - t0 )) s); $(count "$OUT/sm90_tests.log")"
grep -E '^\[metric\]' "$OUT/sm90_tests.log" | sed -E 's/^\[metric\] //' | tee -a "$SUMMARY"
grep -E '^\[  FAILED|Failure|rror|illegal|what\(\)' "$OUT/sm90_tests.log" | head -30 | tee -a "$SUMMARY"
wait $BG
note "existing op tests: rc=$? ($(( $(date +%s) - t0 )) s); $(count "$OUT/existing_ops.log")"
grep -E '^\[  FAILED|Failure' "$OUT/existing_ops.log" | head -20 | tee -a "$SUMMARY"

# 3. Runner tests.
t0=$(date +%s)
timeout "$(lim 70 90)" "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter='CudaRunner.*' >"$OUT/runner_tests.log" 2>&1
rc=$?
note "runner tests: rc=$rc ($(( $(date +%s) - t0 )) s); $(count "$OUT/runner_tests.log")"
grep -E '^\[fixture\]|^\[  FAILED  \].*ms\)|rror' "$OUT/runner_tests.log" | head -60 | tee -a "$SUMMARY"

# 4. Bench: ceilings + MoE expert GEMMs at prefill sizes.
t0=$(date +%s)
B_LIM=$(lim 110 25)
timeout "$B_LIM" "$BIN/dsinfer" bench kernels --only moe_prefill --out "$OUT" --commit "$COMMIT" \
  --budget-s $(( B_LIM - 25 )) >"$OUT/bench.log" 2>&1
note "bench kernels --only moe_prefill: rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E '^ceilings|^moe_prefill|rror' "$OUT/bench.log" | tee -a "$SUMMARY"

# 5. V2-Lite prefill, sm_90a expert GEMMs on / off.
for sm90 in 1 0; do
  l=$(lim 40 3)
  [ "$l" -lt 15 ] && { note "v2-lite e2e sm90=$sm90: skipped (time)"; continue; }
  t0=$(date +%s)
  DS_CUDA_PROFILE=1 DS_SM90_GROUPED_GEMM=$sm90 timeout "$l" "$BIN/dsinfer" generate --device cuda \
    --model "$BIN/data/deepseek-v2-lite" --load-format dummy --bench-batch 2 --bench-prompt-len 4096 --max-tokens 2 \
    >"$OUT/v2lite_sm90_$sm90.log" 2>&1
  note "v2-lite e2e sm90=$sm90: rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E 'prefill_ms|profile|rror' "$OUT/v2lite_sm90_$sm90.log" | head -12 | tee -a "$SUMMARY"
done
note "== done in $(( $(date +%s) - T_START )) s"
