#!/usr/bin/env bash
# On the GPU machine (one device call): the numerics checks of the runner (issue 4) on the
# prebuilt binaries packed by scripts/gpu_carry.sh (bin.tar.xz beside this script: the device
# tool sends the session checkout, so both are copied into its ignored .carry/numerics/). Writes to $OUT:
# tests.log (CudaRunner.*, incl. the fixture tests, CudaMlaDecode.*, CudaFp8Quant.*,
# CudaGemm.Fp8RunnerCallPatternSharedBuffers) and bench_decode_{tensor-core,cuda-core}.log (a
# 4-layer dummy V3 decode step with each MLA decode backend).
set -uo pipefail
OUT=${OUT:-/tmp/out}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/g "$OUT" && xz -dc "$HERE/bin.tar.xz" | tar -C /tmp/g -xf - || exit 1
export LD_LIBRARY_PATH=/tmp/g/bin/lib:/usr/local/cuda/lib64:$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export DS_TEST_DATA_DIR=/tmp/g/bin/data DS_BINARY=/tmp/g/bin/dsinfer
B=/tmp/g/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1
echo "commit $(cat $B/COMMIT)" >>"$OUT/gpu.txt"
timeout 100 $B/dsinfer_cuda_tests \
  --gtest_filter='CudaRunner.*:CudaMlaDecode.*:CudaFp8Quant.*:CudaGemm.Fp8RunnerCallPatternSharedBuffers' \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$?" >>"$OUT/gpu.txt"
for be in tensor-core cuda-core; do
  timeout 20 $B/dsinfer generate --device cuda --model $B/data/deepseek-v3 --load-format dummy --num-layers 4 \
    --bench-batch 32 --bench-prompt-len 1024 --max-tokens 6 --decode-attention-backend $be \
    >"$OUT/bench_decode_$be.log" 2>&1
  echo "bench $be rc=$?" >>"$OUT/gpu.txt"
done
cat "$OUT/gpu.txt"
grep -E "^\[fixture\]|^\[  FAILED|^\[  PASSED|tests ran|OK \]|FAILED \]" "$OUT/tests.log" | grep -v "per row" | tail -60
grep -h "decode_step_ms\|prefill_ms\|bench:" "$OUT"/bench_decode_*.log
