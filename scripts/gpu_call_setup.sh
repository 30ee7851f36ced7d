# Sourced by a device call script (the device tool runs it in the checkout's root, carry
# [".carry"] packed by scripts/gpu_carry.sh): unpacks the carried binaries into /tmp/dsinfer_e2e,
# sets B (the bin dir), LD_LIBRARY_PATH (carried libs, CUDA, the venv's cuBLAS), DS_TEST_DATA_DIR
# and DS_BINARY for dsinfer_cuda_tests (with the checkout's tests/data fixtures copied in, since
# CARRY_DATA=0 leaves them out), and writes nvidia_smi.txt, date.txt and commit.txt into $R
# (created). Usage: R=/tmp/cN; . scripts/gpu_call_setup.sh
# It also defines ob, one `dsinfer bench one-batch` on the dummy weights (the copy ceiling 3,931
# GB/s, 700 TFLOP/s) into $R/ob_<name>.{log,json}, printing its median-step line:
#   ob <name> "<model and shape args>" [ENV=value ...]   (OB_OUTPUT_LEN, default 64; OB_TIMEOUT, 60 s)
#   obx <name> <binary> "<args>" [ENV=value ...]          (the same with another binary)
# e.g. ob def_1 "--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024" DS_X=1
mkdir -p "$R" /tmp/dsinfer_e2e
B=/tmp/dsinfer_e2e/bin
xz -dc .carry/bin.tar.xz | tar -C /tmp/dsinfer_e2e -xf -
[ -d tests/data ] && cp -r tests/data/* "$B/data/"
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/nvidia_smi.txt" 2>&1
date -u +%FT%TZ > "$R/date.txt"
cat "$B/COMMIT" > "$R/commit.txt"
# obx <name> <binary> "<args>" [ENV=value ...]: the same with another dsinfer binary (an A/B of
# builds carried side by side; bench/ob_steps.py summarises the steps by split count).
obx() {
  local name=$1 bin=$2 args=$3
  shift 3
  env "$@" timeout "${OB_TIMEOUT:-60}" "$bin" bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 \
    --flops-tflops 700 $args --output-len "${OB_OUTPUT_LEN:-64}" --output-file "$R/ob_$name.json" > "$R/ob_$name.log" 2>&1
  echo "$name rc=$? $(grep -E 'median step' "$R/ob_$name.log" | head -1 | cut -c1-90)"
}
ob() {
  local name=$1 args=$2
  shift 2
  obx "$name" "$B/dsinfer" "$args" "$@"
}
