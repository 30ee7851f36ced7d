#!/usr/bin/env bash
# One GPU run for the split-K / per-head skinny GEMM work (branch splitk): the skinny op tests
# and CudaRunner.* (concurrently), then `dsinfer bench kernels --only skinny_dense` alone.
# Usage (device tool, carry ["build-gpu-splitk"]): bash build-gpu-splitk/gpu_splitk.sh
set -uo pipefail
START=$(date +%s)
LIMIT=${SCRIPT_LIMIT_S:-140}
OUTD=${OUT:-/tmp/splitk_out}
mkdir -p "$OUTD" /tmp/g
D=$(dirname "$0")
xz -dc "$D/bin.tar.xz" | tar -C /tmp/g -xf -
B=/tmp/g/bin
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
C=$(cat $B/COMMIT)
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit $C"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } > "$OUTD/env.txt" 2>&1
echo "[splitk] unpacked in $(( $(date +%s) - START )) s" | tee "$OUTD/summary.txt"
t=$(date +%s)
timeout 50 $B/dsinfer_cuda_tests --gtest_filter='CudaSkinnyGemm.*' > "$OUTD/skinny_tests.log" 2>&1 &
P1=$!
timeout 50 $B/dsinfer_cuda_tests --gtest_filter='CudaRunner.*' > "$OUTD/runner_tests.log" 2>&1 &
P2=$!
wait $P1; R1=$?
wait $P2; R2=$?
echo "[splitk] skinny tests rc=$R1, runner tests rc=$R2 in $(( $(date +%s) - t )) s" | tee -a "$OUTD/summary.txt"
grep -hE "^\[ +(OK|FAILED) +\]|^\[  PASSED|^\[  FAILED|tests ran" "$OUTD/skinny_tests.log" "$OUTD/runner_tests.log" >> "$OUTD/summary.txt"
grep -h "\[metric\].*FAIL" "$OUTD/skinny_tests.log" | head -20 >> "$OUTD/summary.txt"
LEFT=$(( LIMIT - ($(date +%s) - START) ))
BUDGET=$(( LEFT - 12 ))
[ $BUDGET -lt 10 ] && BUDGET=10
mkdir -p "$OUTD/bench"
t=$(date +%s)
timeout $(( LEFT > 5 ? LEFT - 2 : 3 )) $B/dsinfer bench kernels --only skinny_dense --budget-s $BUDGET --out "$OUTD/bench" \
  --commit "$C" > "$OUTD/bench.log" 2>&1
echo "[splitk] bench rc=$? in $(( $(date +%s) - t )) s (budget $BUDGET s)" | tee -a "$OUTD/summary.txt"
echo "[splitk] total $(( $(date +%s) - START )) s" | tee -a "$OUTD/summary.txt"
