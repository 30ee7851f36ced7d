#!/usr/bin/env bash
# Skinny (decode-size) GEMM checks in one GPU call (branch skinny). Here: build build-cuda,
# `bash scripts/gpu_carry.sh DIR`, copy the V2-Lite config to DIR/v2lite/ and this script to
# DIR, where DIR is an ignored folder of the checkout the device tool sends (the session's
# checkout, not a helper's worktree); then run `CARRY=DIR bash DIR/gpu_skinny.sh` with carry [DIR].
# There: 1. op tests (skinny GEMM, MoE experts, FP8 odd shapes), 2. CudaRunner.* tests (fixtures,
# graphs, dummy V3), 3. `dsinfer bench kernels --only skinny`, 4. `dsinfer bench one-batch` at
# batch 1 (V2-Lite full, V3 dummy 6 layers) with the skinny kernel and without
# (DS_SKINNY_GEMM=0). Everything under $OUT; TOTAL_S bounds the whole run.
set -uo pipefail
T0=$(date +%s)
TOTAL_S=${TOTAL_S:-140}
OUT=${OUT:-/tmp/gpu_skinny}
mkdir -p "$OUT"
left() { echo $(( TOTAL_S - ($(date +%s) - T0) )); }
cap() { local want=$1 l; l=$(left); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 1 ] && want=1; echo "$want"; }
CARRY=${CARRY:-.carry}
mkdir -p /tmp/g && xz -dc "$CARRY/bin.tar.xz" | tar -C /tmp/g -xf - || { echo "unpack failed"; exit 1; }
BIN=/tmp/g/bin
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR="$BIN/data" DS_BINARY="$BIN/dsinfer"
S="$OUT/summary.txt"
note() { echo "$*" | tee -a "$S"; }
note "== gpu_skinny $(date -u +%FT%TZ) commit $(cat "$BIN/COMMIT")"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee -a "$S"

t=$(date +%s)
timeout "$(cap 45)" "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter='CudaSkinny*' >"$OUT/ops.log" 2>&1
note "ops rc=$? ($(( $(date +%s) - t )) s): $(grep -c '^\[       OK' "$OUT/ops.log") ok, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/ops.log") failed; metrics $(grep -c ' PASS$' "$OUT/ops.log") pass, $(grep -c ' FAIL$' "$OUT/ops.log") fail"
grep -E ' FAIL$|^\[  FAILED|Failure|rror' "$OUT/ops.log" | head -20 | tee -a "$S"

t=$(date +%s)
timeout "$(cap 30)" "$BIN/dsinfer_cuda_tests" --gtest_color=no --gtest_filter='CudaRunner.*' >"$OUT/runner.log" 2>&1
note "runner rc=$? ($(( $(date +%s) - t )) s): $(grep -c '^\[       OK' "$OUT/runner.log") ok, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/runner.log") failed"
grep -E '^\[  FAILED  \].*ms\)|^\[       OK' "$OUT/runner.log" | tee -a "$S"

t=$(date +%s)
mkdir -p "$OUT/kernels"
timeout "$(cap 50)" "$BIN/dsinfer" bench kernels --only skinny --budget-s 38 --out "$OUT/kernels" \
  --commit "$(cat "$BIN/COMMIT")" >"$OUT/bench_kernels.log" 2>&1
note "bench kernels rc=$? ($(( $(date +%s) - t )) s)"

ob() {  # name, model dir, extra args...
  local name=$1 dir=$2; shift 2
  for sk in 1 0; do
    [ "$(left)" -lt 8 ] && { note "one-batch $name skinny=$sk: no time left"; continue; }
    t=$(date +%s)
    DS_SKINNY_GEMM=$sk timeout "$(cap 25)" "$BIN/dsinfer" bench one-batch --device cuda --model "$dir" --load-format dummy \
      --batch-size 1 --input-len 32 --output-len 17 --mem-bw-gbps 3931 --flops-tflops 700 "$@" \
      >"$OUT/one_batch_${name}_skinny$sk.log" 2>&1
    note "one-batch $name skinny=$sk rc=$? ($(( $(date +%s) - t )) s): $(grep -E '^decode:' "$OUT/one_batch_${name}_skinny$sk.log")"
  done
}
ob v2lite "$CARRY/v2lite"
ob v3_6layers "$BIN/data/deepseek-v3" --num-layers 6
for m in v2lite v3_6layers; do  # where the decode step goes (device ms per section)
  [ "$(left)" -lt 8 ] && break
  d="$CARRY/v2lite"; extra=""; [ $m = v3_6layers ] && d="$BIN/data/deepseek-v3" && extra="--num-layers 6"
  DS_CUDA_PROFILE=1 timeout "$(cap 25)" "$BIN/dsinfer" bench one-batch --device cuda --model "$d" --load-format dummy \
    --batch-size 1 --input-len 32 --output-len 17 --mem-bw-gbps 3931 --flops-tflops 700 $extra >"$OUT/profile_$m.log" 2>&1
  note "profile $m: $(grep -o 'profile.*' "$OUT/profile_$m.log" | head -1)"
done
note "total $(( $(date +%s) - T0 )) s"
