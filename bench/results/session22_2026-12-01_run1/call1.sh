set -uo pipefail
R=/tmp/c1; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, env assignments...
  local name=$1; shift
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --batch-size 1 --input-len 1024 --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1)"
}
for i in 1 2; do
  ob base_$i X=1
  ob seg_$i DS_PERSISTENT_MOE_SEG_READY=1
  ob wo3_$i DS_ATTN_WO_STAGE=3
  ob wo4_$i DS_ATTN_WO_STAGE=4
  ob plain_$i DS_PERSISTENT_PLAIN_LAUNCH=1
  ob all3_$i DS_PERSISTENT_MOE_SEG_READY=1 DS_ATTN_WO_STAGE=3 DS_PERSISTENT_PLAIN_LAUNCH=1
done
echo "ab done $(( $(date +%s) - T0 ))s"
timeout 120 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport:CudaMlaAttnPersistent.DISABLED_TimingReport:CudaGridBarrier.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "timing|grid_launch" $R/timing.log | grep -v stamps=1 | head -30
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.SegReady*:CudaRunnerPersistentMoe.PlainLaunch*:CudaRunnerAttnPersistent.WoStage*:CudaGridBarrier.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
tar -C $R -czf $OUT/call1.tgz .
