set -uo pipefail
R=/tmp/c2; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, env assignments...
  local name=$1; shift
  env "$@" timeout 30 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --batch-size 1 --input-len 1024 --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1)"
}
timeout 90 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.SegReady*:CudaRunnerPersistentMoe.SegReady*' > $R/tests_seg.log 2>&1
SEG=$?
echo "seg tests rc=$SEG $(( $(date +%s) - T0 ))s"; grep -E "^\[ +(OK|FAILED) +\]|PASSED|FAILED" $R/tests_seg.log | head
for i in 1 2; do
  ob base_$i X=1
  ob wo3_$i DS_ATTN_WO_STAGE=3
  if [ $SEG = 0 ]; then ob seg_$i DS_PERSISTENT_MOE_SEG_READY=1; ob segwo3_$i DS_PERSISTENT_MOE_SEG_READY=1 DS_ATTN_WO_STAGE=3; fi
done
echo "ab done $(( $(date +%s) - T0 ))s"
if [ $SEG = 0 ]; then
timeout 60 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "moe_persistent_timing" $R/timing.log
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*:CudaRunnerAttnPersistent.*:CudaGridBarrier.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
fi
tar -C $R -czf $OUT/call2.tgz .
