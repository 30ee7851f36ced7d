set -uo pipefail
R=/tmp/c6; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, env assignments...
  local name=$1; shift
  env "$@" timeout 30 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --batch-size 1 --input-len 1024 --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1)"
}
timeout 60 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.SharedGateUp*' > $R/tests_gu.log 2>&1
GU=$?
echo "gu test rc=$GU $(( $(date +%s) - T0 ))s"; grep -E "^\[ +(OK|FAILED) +\]|PASSED|FAILED|differ|Failure" $R/tests_gu.log | head
grep -i "attn_shared_gu" $R/tests_gu.log | head -3
for i in 1 2 3; do
  ob base_$i X=1
  [ $GU = 0 ] && ob gu_$i DS_ATTN_SHARED_GU=1
done

echo "ab done $(( $(date +%s) - T0 ))s"
timeout 60 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "moe_persistent_timing" $R/timing.log
timeout 180 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*:CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
tar -C $R -czf $OUT/call6.tgz .
