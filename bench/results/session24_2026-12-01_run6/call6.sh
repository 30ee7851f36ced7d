set -uo pipefail
R=/tmp/s24c6; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, env assignments...
  local name=$1; shift
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --batch-size 1 --input-len 1024 --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
timeout 100 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=moe_persistent_timing|next_norm=0 router_opts=[0-9] (phase2|barrier2)|moe_persistent_tiles.*next_norm=0.*1 shared.*(route|routed|probe|round [0-1])" $R/timing.log | sed 's/\[metric\] op=//; s/case=V2Lite bps=2 gu_ksplit=8 shared_first=1 l2_fetch=1 //'
for i in 1 2 3; do
  ob base_$i X=1
  ob small_$i DS_PERSISTENT_MOE_ROUTE_SMALL=1
done
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call6.tgz .
