set -uo pipefail
R=/tmp/c15; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaMoePersistent.*:CudaRunnerAttnPersistent.*:CudaRunnerPersistentMoe.*:CudaRunnerPdl.*:CudaPdl*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
timeout 60 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$?"; grep -E "moe_persistent_timing" $R/timing.log | sed 's/.*case=V2Lite //' | cut -c1-150
grep -E "tail_fold=0 l2_fetch=1" $R/timing.log | sed 's/.*l2_fetch=1 //'
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
run() { local name=$1 env=$2 args=$3
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
run v2_1 "" "$B1"; run v2_2 "" "$B1"; run v2_pdl "DS_PERSISTENT_PDL=1" "$B1"; run v2_3 "" "$B1"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call15.tgz .
