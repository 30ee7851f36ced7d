set -uo pipefail
R=/tmp/c4; mkdir -p $R
B=/tmp/dsinfer_e2e/bin
mkdir -p /tmp/dsinfer_e2e && xz -dc .carry/bin.tar.xz | tar -C /tmp/dsinfer_e2e -xf -
cp -r tests/data/* $B/data/   # the fixtures (from the checkout; not carried)
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/nvidia_smi.txt 2>&1
date -u +%FT%TZ > $R/date.txt; cat $B/COMMIT > $R/commit.txt
T0=$(date +%s)
timeout 450 $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
M='--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 64'
OFF="DS_ATTN_ABSORB_OVERLAP=0 DS_PERSISTENT_MOE_SHARED_FIRST=0"
for run in new off new2 off2 new3 off3; do
  case $run in new*) env="";; off*) env="$OFF";; esac
  [ $(( $(date +%s) - T0 )) -gt 540 ] && { echo "skip $run"; continue; }
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $M --output-file $R/ob_$run.json" > $R/ob_$run.log 2>&1
  echo "$run rc=$? [$env] $(grep -E 'median step' $R/ob_$run.log | head -2 | tr '\n' ' ')"
done
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call4.tgz .
