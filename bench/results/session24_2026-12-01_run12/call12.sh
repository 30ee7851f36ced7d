set -uo pipefail
R=/tmp/s24c12; . scripts/gpu_call_setup.sh
xz -dc .carry/dsinfer_prev.xz > $B/dsinfer_prev && chmod +x $B/dsinfer_prev
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, binary, model + shape args, env assignments...
  local name=$1 bin=$2 args=$3; shift 3
  env "$@" timeout 40 $B/$bin bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*:CudaMoeRouting.*:CudaMoeRouterRoute.*:CudaMoeRoutePermute.*:CudaRunnerRouteWarp.*:CudaRunnerRouterRoute.*:CudaRunner.Fixtures*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
timeout 100 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=moe_persistent_timing|next_norm=0 (phase2|barrier2|phase3)" $R/timing.log | sed 's/\[metric\] op=//; s/case=V2Lite bps=2 gu_ksplit=8 shared_first=1 l2_fetch=1 //'
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do
  ob prev_$i dsinfer_prev "$S1"
  ob new_$i dsinfer "$S1"
done
S4="$V2 --batch-size 1 --input-len 4096"
ob prev_4k dsinfer_prev "$S4"; ob new_4k dsinfer "$S4"
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"
ob prev_v3 dsinfer_prev "$V3"; ob new_v3 dsinfer "$V3"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call12.tgz .
