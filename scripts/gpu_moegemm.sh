#!/usr/bin/env bash
# MoE grouped GEMM rewrite (branch moegemm): correctness + benchmark in one GPU call.
#
# Here (no GPU):   bash scripts/gpu_moegemm.sh pack DEST
#   packs build-cuda's binaries with scripts/gpu_carry.sh into DEST (plus, when BASE_TESTS
#   points at one, a dsinfer_cuda_tests built from the parent commit, for a baseline of the
#   runner tests) and copies this script there. The device tool sends the lead's checkout, so
#   DEST is an ignored folder of it (e.g. /work/main/build-gpu-moegemm); then `run` with carry
#   ["build-gpu-moegemm"] and the command `bash build-gpu-moegemm/gpu_moegemm.sh run`.
# There (GPU):     bash DEST/gpu_moegemm.sh run      (logs under $OUT)
#   1. nvidia-smi;
#   2. in the background (CPU-heavy references, little GPU work): CudaMoeExperts.* and
#      CudaGemm.Fp8OddShapesBothPaths (the existing grouped GEMM op tests);
#   3. CudaGroupedGemm.* (new op tests) + CudaPerf.GroupedGemmDecodeV3;
#   4. CudaRunner.* (fixtures and runner checks); if any fails, the same tests from the
#      parent commit's binary, to tell new failures from old ones;
#   5. `dsinfer bench kernels --only moe` (old WMMA vs new mma.sync kernel on the same buffers).
#   TOTAL_S (default 145) bounds the whole run.
set -uo pipefail
MODE=${1:-run}
if [ "$MODE" = pack ]; then
  ROOT=$(cd "$(dirname "$0")/.." && pwd)
  DEST=${2:?usage: gpu_moegemm.sh pack DEST}
  bash "$ROOT/scripts/gpu_carry.sh" "$DEST" || exit 1
  if [ -n "${BASE_TESTS:-}" ]; then
    strip -o /tmp/moegemm_base_tests "$BASE_TESTS" && xz -T2 -6 -c /tmp/moegemm_base_tests >"$DEST/base_tests.xz"
  fi
  cp "$0" "$DEST/gpu_moegemm.sh"
  du -sh "$DEST"/*
  exit 0
fi
CARRY=$(cd "$(dirname "$0")" && pwd)  # bin.tar.xz, base_tests.xz and this script

T_START=$(date +%s)
TOTAL_S=${TOTAL_S:-145}
OUT=${OUT:-/tmp/gpu_moegemm}
mkdir -p "$OUT"
BIN=/tmp/moegemm_g/bin
rm -rf /tmp/moegemm_g && mkdir -p /tmp/moegemm_g && xz -dc "$CARRY/bin.tar.xz" | tar -C /tmp/moegemm_g -xf - || { echo "unpack failed"; exit 1; }
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR="$BIN/data"
COMMIT=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - T_START )); }
count() {  # log -> "N ok, M failed; metrics P pass, F fail"
  echo "$(grep -c '^\[       OK' "$1") ok, $(grep -c '^\[  FAILED  \].*ms)' "$1") failed; metrics $(grep -c ' PASS$' "$1") pass, $(grep -c ' FAIL$' "$1") fail"
}

note "== gpu_moegemm $(date -u +%FT%TZ) commit $COMMIT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$SUMMARY"

# 2. Existing grouped GEMM op tests in the background (about 70 s of CPU reference work).
OPENBLAS_NUM_THREADS=8 timeout 120 "$BIN/dsinfer_cuda_tests" --gtest_color=no \
  --gtest_filter='CudaMoeExperts.*:CudaGemm.Fp8OddShapesBothPaths' >"$OUT/existing_ops.log" 2>&1 &
BG=$!

# 3. New op tests.
t0=$(date +%s)
OPENBLAS_NUM_THREADS=8 timeout 60 "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter='CudaGroupedGemm.*:CudaPerf.GroupedGemmDecodeV3' >"$OUT/grouped_gemm_tests.log" 2>&1
rc=$?
note "grouped gemm tests: rc=$rc ($(( $(date +%s) - t0 )) s); $(count "$OUT/grouped_gemm_tests.log")"
grep -E '^\[metric\]|^\[perf\]' "$OUT/grouped_gemm_tests.log" | sed -E 's/^\[(metric|perf)\] //' | tee -a "$SUMMARY"
grep -E '^\[  FAILED|Failure|error|illegal' "$OUT/grouped_gemm_tests.log" | head -20 | tee -a "$SUMMARY"
CRASH=0
grep -qiE 'illegal|misaligned|unspecified launch' "$OUT/grouped_gemm_tests.log" && CRASH=1

# 4. Runner tests (fixtures vs golden, dummy V3, graphs).
t0=$(date +%s)
timeout 40 "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter='CudaRunner.*' >"$OUT/runner_tests.log" 2>&1
rc=$?
note "runner tests: rc=$rc ($(( $(date +%s) - t0 )) s); $(count "$OUT/runner_tests.log")"
grep -E '^\[fixture\]|^\[  FAILED  \].*ms\)' "$OUT/runner_tests.log" | head -40 | tee -a "$SUMMARY"
if [ $rc -ne 0 ] && [ -f "$CARRY/base_tests.xz" ]; then
  xz -dc "$CARRY/base_tests.xz" >/tmp/moegemm_g/base_tests && chmod +x /tmp/moegemm_g/base_tests
  F=$(grep -E '^\[  FAILED  \].*ms\)' "$OUT/runner_tests.log" | sed -E 's/.*\] ([^ ]+) .*/\1/' | paste -sd: -)
  timeout 30 /tmp/moegemm_g/base_tests --gtest_color=no --gtest_filter="$F" >"$OUT/runner_tests_base.log" 2>&1
  note "baseline (parent commit) on the failing runner tests [$F]: rc=$? $(count "$OUT/runner_tests_base.log")"
  grep -E '^\[fixture\]|^\[  FAILED  \].*ms\)' "$OUT/runner_tests_base.log" | head -20 | tee -a "$SUMMARY"
fi

# 5. Bench (MoE family; ceilings always run).
left=$(( TOTAL_S - $(elapsed) ))
budget=$(( left - 25 ))
[ $budget -lt 15 ] && budget=15
note "bench: budget ${budget} s, hard limit $(( left - 5 )) s (started at $(elapsed) s)"
if [ $CRASH = 0 ]; then
  mkdir -p /tmp/moegemm_bench
  timeout $(( left - 5 )) "$BIN/dsinfer" bench kernels --only moe --budget-s "$budget" --out /tmp/moegemm_bench --commit "$COMMIT" >"$OUT/bench.log" 2>&1
  note "bench: rc=$? ($(elapsed) s since start)"
  cp /tmp/moegemm_bench/kernels.md "$OUT/" 2>/dev/null
  grep -E 'moe_grouped|dense_fp8|ceiling' "$OUT/bench.log" | tee -a "$SUMMARY"
else
  note "bench skipped: the new kernel crashed"
fi

wait $BG
note "existing grouped gemm op tests (background): rc=$? $(count "$OUT/existing_ops.log")"
grep -E '^\[metric\]' "$OUT/existing_ops.log" | sed -E 's/^\[metric\] //' | tee -a "$SUMMARY"
grep -E '^\[  FAILED|Failure' "$OUT/existing_ops.log" | head -10 | tee -a "$SUMMARY"
note "== done $(date -u +%FT%TZ) ($(elapsed) s)"
