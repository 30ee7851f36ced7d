set -uo pipefail
R=/tmp/c11; mkdir -p $R
B=/tmp/dsinfer_e2e/bin
mkdir -p /tmp/dsinfer_e2e && xz -dc .carry/bin.tar.xz | tar -C /tmp/dsinfer_e2e -xf -
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/nvidia_smi.txt 2>&1
date -u +%FT%TZ > $R/date.txt; cat $B/COMMIT > $R/commit.txt
T0=$(date +%s)
timeout 120 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
timeout 100 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$?"
grep -E "mla_attn_persistent_timing" $R/timing.log | grep "stamps=0" | grep "in_norm=1" | sed 's/.*ctx=/ctx=/'
grep -E "mla_attn_persistent_phase ctx=1024 in_norm=1 overlap=1 split=1 phase=1" $R/timing.log | sed 's/.*segment=//'
M='--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 64'
for run in def pc def2 pc2 def3 pc3; do
  case $run in def*) env="";; pc*) env="DS_ATTN_PHASE_COUNTERS=1";; esac
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $M --output-file $R/ob_$run.json" > $R/ob_$run.log 2>&1
  echo "$run rc=$? [$env] $(grep -E 'median step' $R/ob_$run.log | head -2 | tr '\n' ' ')"
done
echo "total $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
tar -C $R -czf $OUT/call11.tgz .
