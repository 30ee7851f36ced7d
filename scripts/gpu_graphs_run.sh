#!/usr/bin/env bash
# One GPU call for the CUDA-graph decode work: unpack .carry (scripts/gpu_carry.sh), run the
# CudaRunner tests (graph vs eager, fixtures, dummy V3) and the 13-layer DeepSeek-V3 dummy
# bench with CUDA graphs on and off. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_graphs}
mkdir -p "$OUT"
C=${CARRY:-.carry}
tar -C "$C" -xJf "$C/bin.tar.xz"
BIN=$(cd "$C/bin" && pwd)
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR="$BIN/data" DS_BINARY="$BIN/dsinfer"
S="$OUT/summary.txt"
echo "commit $(cat "$BIN/COMMIT") $(date -u +%FT%TZ)" | tee "$S"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$S"
# The new graph tests first (own time limit), then the other CudaRunner tests.
run_tests() {  # name filter limit
  timeout "$3" "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter="$2" >"$OUT/$1.log" 2>&1
  echo "$1 rc=$?" | tee -a "$S"
  grep -E '^\[fixture\]|^\[  FAILED|^\[  PASSED|^\[       OK|not captured' "$OUT/$1.log" | tee -a "$S"
}
run_tests graph_tests 'CudaRunner.Graph*:CudaRunner.GenerateBench*' "${TEST_TIMEOUT:-60}"
run_tests runner_tests 'CudaRunner.*-CudaRunner.Graph*:CudaRunner.GenerateBench*' "${TEST_TIMEOUT2:-40}"
for mode in on off; do
  extra=""; [ $mode = off ] && extra="--disable-cuda-graph"
  timeout "${BENCH_TIMEOUT:-65}" "$BIN/dsinfer" generate --device cuda --model "$BIN/data/deepseek-v3" --load-format dummy \
    --num-layers "${BENCH_LAYERS:-13}" --bench-batch "${BENCH_BATCH:-64}" --bench-prompt-len "${BENCH_PROMPT:-2048}" \
    --max-tokens "${BENCH_GEN:-64}" $extra >"$OUT/bench_v3_graphs_$mode.log" 2>&1
  echo "bench graphs=$mode rc=$?" | tee -a "$S"
  grep -E '^bench:|prefill_ms|decode_step_ms|nonfinite|seq0_tokens|graph' "$OUT/bench_v3_graphs_$mode.log" | head -12 | tee -a "$S"
done
