set -uo pipefail
R=/tmp/c3; mkdir -p $R
B=/tmp/dsinfer_e2e/bin
mkdir -p /tmp/dsinfer_e2e && xz -dc .carry/bin.tar.xz | tar -C /tmp/dsinfer_e2e -xf -
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/nvidia_smi.txt 2>&1
date -u +%FT%TZ > $R/date.txt; cat $B/COMMIT > $R/commit.txt
T0=$(date +%s)
timeout 300 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*:CudaRunnerAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
timeout 150 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "moe_persistent_timing" $R/timing.log
grep -E "moe_persistent_phase.*bps=2 gu_ksplit=8" $R/timing.log | grep -E "phase2|barrier1|barrier2|phase3"
M='--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 64'
AS="DS_ATTN_ABSORB_OVERLAP=1 DS_PERSISTENT_MOE_SHARED_FIRST=1"
for run in def as asd sd def2 as2 asd2 sd2 def3 as3 asd3; do
  case $run in def*) env="";; as[0-9]*|as) env="$AS";; asd*) env="$AS DS_PERSISTENT_MOE_STAGE_DOWN=1";; sd*) env="DS_PERSISTENT_MOE_STAGE_DOWN=1";; esac
  [ $(( $(date +%s) - T0 )) -gt 500 ] && { echo "skip $run"; continue; }
  eval "timeout 90 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $M --output-file $R/ob_$run.json" > $R/ob_$run.log 2>&1
  echo "$run rc=$? [$env] $(grep -E 'median step' $R/ob_$run.log | head -2 | tr '\n' ' ')"
done
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call3.tgz .
