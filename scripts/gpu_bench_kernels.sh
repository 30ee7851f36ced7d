#!/usr/bin/env bash
# Kernel correctness + benchmark in one GPU call (issue 5).
#
# Here (no GPU):   bash scripts/gpu_bench_kernels.sh pack [DEST]
#   builds build-cuda (dsinfer, dsinfer_cuda_tests; -DDS_CUDA=ON -DDS_STATIC=ON) and packs the
#   binaries + this script into DEST (default /work/main/.carry/kernels; gpu_carry.sh's layout).
#   Then call the device tool's `run` with carry [".carry"] and the command
#   `bash .carry/kernels/scripts/gpu_bench_kernels.sh run .carry/kernels`.
# There (GPU):     bash gpu_bench_kernels.sh run CARRY_DIR
#   1. nvidia-smi; 2. the MLA decode op tests (CUDA-core and tensor-core kernels vs the CPU op)
#   and the runner check of the tensor-core kernel (dummy V3, 4 layers; TEST_FILTER overrides);
#   3. `dsinfer bench kernels` (full list, cut by --budget-s; --quick if QUICK=1), which writes
#   kernels.json + kernels.md. Logs and results go to $OUT (default /tmp/gpu_bench_kernels):
#   summary.txt, nvidia_smi.txt, mla_tests.log, bench.log, kernels.json, kernels.md.
#   TOTAL_S (default 280) bounds the whole run: the bench gets what the tests leave, minus 45 s.
set -uo pipefail
MODE=${1:-run}
if [ "$MODE" = pack ]; then
  ROOT=$(cd "$(dirname "$0")/.." && pwd)
  DEST=${2:-/work/main/.carry/kernels}
  cmake -S "$ROOT" -B "$ROOT/build-cuda" -G Ninja -DDS_CUDA=ON -DDS_STATIC=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$ROOT/build-cuda" -j 2 --target dsinfer dsinfer_cuda_tests || exit 1
  bash "$ROOT/scripts/gpu_carry.sh" "$DEST" || exit 1
  cp "$ROOT/scripts/gpu_bench_kernels.sh" "$DEST/scripts/"
  du -sh "$DEST"
  exit 0
fi

T_START=$(date +%s)
TOTAL_S=${TOTAL_S:-280}
OUT=${OUT:-/tmp/gpu_bench_kernels}
mkdir -p "$OUT"
CARRY=$(cd "${2:-$(dirname "$0")/..}" && pwd)
BIN=/tmp/dsinfer_kernels/bin
mkdir -p /tmp/dsinfer_kernels && xz -dc "$CARRY/bin.tar.xz" | tar -C /tmp/dsinfer_kernels -xf - || { echo "unpack failed"; exit 1; }
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR="$BIN/data"
COMMIT=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

note "== gpu_bench_kernels $(date -u +%FT%TZ) commit $COMMIT"
nvidia-smi >"$OUT/nvidia_smi.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$SUMMARY"

# 2. MLA decode op tests (both kernels; see tests/cuda/test_mla_decode.cpp).
t0=$(date +%s)
timeout 100 "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter="${TEST_FILTER:-CudaMlaDecode*:CudaRunner.DummyV3DecodeTensorCoresMatchEmulation}" >"$OUT/mla_tests.log" 2>&1
rc=$?
note "mla tests: rc=$rc ($(( $(date +%s) - t0 )) s); $(grep -c '^\[       OK' "$OUT/mla_tests.log") ok, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/mla_tests.log") failed; metrics: $(grep -c ' PASS$' "$OUT/mla_tests.log") pass, $(grep -c ' FAIL$' "$OUT/mla_tests.log") fail"
grep -E '^\[(metric|fixture)\]' "$OUT/mla_tests.log" | sed -E 's/^\[(metric|fixture)\] //' | tee -a "$SUMMARY"
grep -E '^\[  FAILED|Failure|error' "$OUT/mla_tests.log" | head -20 | tee -a "$SUMMARY"

# 3. The benchmark. A crashed tensor-core kernel (bad address) would take the whole bench
# down with it: then the bench runs without the MLA decode families.
ONLY=()
if grep -qiE 'illegal|misaligned|unspecified launch|an illegal' "$OUT/mla_tests.log" || [ $rc -gt 1 ]; then
  note "tensor-core MLA kernel crashed or the tests died: bench without MLA decode"
  ONLY=(--only fp8_gemm moe small mla_prefill)
fi
left=$(( TOTAL_S - ($(date +%s) - T_START) ))
budget=$(( left - 45 ))
[ $budget -lt 20 ] && budget=20
QFLAG=()
[ "${QUICK:-0}" = 1 ] && QFLAG=(--quick)
note "bench: budget ${budget} s, hard limit $(( left - 10 )) s"
timeout $(( left - 10 )) "$BIN/dsinfer" bench kernels "${QFLAG[@]}" --budget-s "$budget" --out "$OUT" --commit "$COMMIT" "${ONLY[@]}" >"$OUT/bench.log" 2>&1
note "bench: rc=$? ($(( $(date +%s) - T_START )) s since start)"
grep -E '^ceilings|^mixed check' "$OUT/bench.log" | tee -a "$SUMMARY"
sed -n '/^## MLA decode vs FlashMLA/,/^## All figures/p' "$OUT/kernels.md" 2>/dev/null | tee -a "$SUMMARY"
tail -3 "$OUT/bench.log" | tee -a "$SUMMARY"
note "== done $(date -u +%FT%TZ)"
