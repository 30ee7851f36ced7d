#!/usr/bin/env bash
# Runs every GPU check of the CUDA backend on the GPU machine in one call and writes the logs
# under $OUT (default /tmp/gpu_check): nvidia-smi, the op-equivalence tests
# (dsinfer_cuda_tests), the CPU tests (dsinfer_tests, when present), the fixture checks
# (CUDA runner vs golden and vs the CPU runner) and the real-shape DeepSeek-V3 run.
#
# usage: bash scripts/gpu_check.sh [BIN_DIR]
#   BIN_DIR: prebuilt binaries (dsinfer_cuda_tests, dsinfer, dsinfer_tests; lib/ with extra
#            shared libraries; data/ with the fixtures and the V3 config). Without it, the
#            script configures and builds build-cuda here (needs the Debian dev packages).
#   STAGES="ops cpu fixtures bench" selects stages (default: ops fixtures bench).
#   OPS_FILTER: a gtest filter for the op tests (default: all op cases).
#   BENCH_LAYERS / BENCH_BATCH / BENCH_PROMPT / BENCH_GEN size the real-shape run;
#   BENCH_FP8_GEMM picks its FP8 projection path (default cublas, as measured so far).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-}
if [ -z "$BIN" ]; then
  cmake -S "$ROOT" -B "$ROOT/build-cuda" -G Ninja -DDS_CUDA=ON -DDS_STATIC=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 &&
    cmake --build "$ROOT/build-cuda" -j "$(nproc)" >>"$OUT/build.log" 2>&1 || { echo "build failed"; tail -50 "$OUT/build.log"; exit 1; }
  BIN="$ROOT/build-cuda"
fi
BIN=$(cd "$BIN" && pwd)
DATA=${DATA:-$BIN/data}
[ -d "$DATA" ] || DATA="$ROOT/tests/data"
STAGES=${STAGES:-"ops fixtures bench"}
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR="$DATA"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

note "== gpu_check $(date -u +%FT%TZ) commit $(cat "$BIN/COMMIT" 2>/dev/null || git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee -a "$SUMMARY"

for stage in $STAGES; do
  case $stage in
    ops)
      t0=$(date +%s)
      "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter="${OPS_FILTER:--CudaRunner*}" >"$OUT/cuda_ops.log" 2>&1
      rc=$?
      note "ops: rc=$rc ($(( $(date +%s) - t0 )) s); $(grep -c '^\[       OK' "$OUT/cuda_ops.log") ok, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/cuda_ops.log") failed; metrics: $(grep -c PASS "$OUT/cuda_ops.log") pass, $(grep -c ' FAIL$' "$OUT/cuda_ops.log") fail"
      grep -E '^\[  FAILED|FAIL$' "$OUT/cuda_ops.log" | head -40 | tee -a "$SUMMARY"
      ;;
    cpu)
      if [ -x "$BIN/dsinfer_tests" ]; then
        (cd "$BIN" && DS_BINARY="$BIN/dsinfer" ./dsinfer_tests --gtest_color=no >"$OUT/cpu_tests.log" 2>&1)
        note "cpu tests: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/cpu_tests.log" | head -3 | tr '\n' ' ')"
      fi
      ;;
    fixtures)
      if "$BIN/dsinfer_cuda_tests" --gtest_list_tests | grep -q CudaRunner; then
        "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter='CudaRunner*' >"$OUT/cuda_fixtures.log" 2>&1
        note "fixtures: rc=$?"
        grep -E '^\[fixture\]|FAILED' "$OUT/cuda_fixtures.log" | head -60 | tee -a "$SUMMARY"
      fi
      # The CLI end to end on a fixture: CUDA vs CPU greedy ids.
      for fx in v3_tiny v2_lite_tiny; do
        [ -d "$DATA/$fx" ] || continue
        a=$("$BIN/dsinfer" generate --device cuda --model "$DATA/$fx" --prompt-ids 5,17,99,3,250,42,7,11 --max-tokens 12 2>>"$OUT/cli.log")
        b=$("$BIN/dsinfer" generate --device cpu --model "$DATA/$fx" --prompt-ids 5,17,99,3,250,42,7,11 --max-tokens 12 2>>"$OUT/cli.log")
        note "cli $fx: cuda [$a] cpu [$b] $([ "$a" = "$b" ] && echo SAME || echo DIFFERENT)"
      done
      ;;
    bench)
      if [ -x "$BIN/dsinfer" ] && [ -f "$DATA/deepseek-v3/config.json" ]; then
        DS_CUDA_PROFILE=1 timeout "${BENCH_TIMEOUT:-300}" "$BIN/dsinfer" generate --device cuda --model "$DATA/deepseek-v3" --load-format dummy --fp8-gemm "${BENCH_FP8_GEMM:-cublas}" \
          --num-layers "${BENCH_LAYERS:-12}" --bench-batch "${BENCH_BATCH:-64}" --bench-prompt-len "${BENCH_PROMPT:-2048}" \
          --max-tokens "${BENCH_GEN:-256}" >"$OUT/bench_v3.log" 2>&1
        note "bench: rc=$?"
        tail -15 "$OUT/bench_v3.log" | tee -a "$SUMMARY"
      fi
      ;;
  esac
done
note "== done $(date -u +%FT%TZ)"
