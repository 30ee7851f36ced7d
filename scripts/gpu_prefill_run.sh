#!/usr/bin/env bash
# One GPU call for the MLA prefill tensor-core work (branch prefill): the prefill op tests, the
# prefill cases of `dsinfer bench kernels` (old vs tensor-core kernel, ceilings in the same run)
# and the CUDA runner tests, each under its own time limit so a slow stage cannot eat the others.
# Logs go to $OUT. Expects bin.tar.xz from scripts/gpu_carry.sh in CARRY (default .carry). The
# device tool sends the session's checkout, not a helper's worktree: copy this script and
# bin.tar.xz into an ignored folder of that checkout, carry it and run the copy from there.
# usage (device run, repository root): CARRY=DIR bash DIR/gpu_prefill_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_prefill}
mkdir -p "$OUT" /tmp/g
xz -dc "${CARRY:-.carry}/bin.tar.xz" | tar -C /tmp/g -xf -
BIN=/tmp/g/bin
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)"
export DS_TEST_DATA_DIR="$BIN/data" DS_BINARY="$BIN/dsinfer"
S="$OUT/summary.txt"
{ echo "== gpu_prefill_run $(date -u +%FT%TZ) commit $(cat "$BIN/COMMIT")";
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; } | tee "$S"
t0=$(date +%s)
timeout "${OPS_S:-40}" "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter='CudaMlaPrefill*' >"$OUT/ops.log" 2>&1
echo "ops: rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$S"
grep -E '^\[metric\]|^\[  FAILED|^\[       OK' "$OUT/ops.log" | tee -a "$S"
t0=$(date +%s)
timeout "${BENCH_S:-55}" "$BIN/dsinfer" bench kernels --only mla_prefill --quick --out "$OUT" --commit "$(cat "$BIN/COMMIT")" >"$OUT/bench.log" 2>&1
echo "bench: rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$S"
grep -E '^ceilings|^mla_prefill' "$OUT/bench.log" | tee -a "$S"
t0=$(date +%s)
timeout "${RUNNER_S:-45}" "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter='CudaRunner.*' >"$OUT/runner.log" 2>&1
echo "runner: rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$S"
grep -E '^\[fixture\]|^\[  FAILED|^\[       OK|^\[  PASSED' "$OUT/runner.log" | tee -a "$S"
