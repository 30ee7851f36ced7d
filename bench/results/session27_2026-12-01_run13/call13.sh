set -uo pipefail
R=$OUT/c13; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -B2 -A10 "Failure" $R/tests.log | head -30
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
S4="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 4096"
for i in 1 2 3; do ob ba_$i "$S1" DS_MOE_BULK_ACT=1; ob def_$i "$S1"; done
ob ba_4k "$S4" DS_MOE_BULK_ACT=1; ob def_4k "$S4"
timeout 150 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=moe_persistent_timing" $R/timing.log | sed 's/case=V2Lite //; s/gu_ksplit=8 shared_first=1 l2_fetch=1 //' | cut -c1-250
grep -E "op=moe_persistent_phase" $R/timing.log | grep "fold=1" | grep -E "phase2|barrier2|phase3" | sed 's/case=V2Lite //; s/gu_ksplit=8 shared_first=1 l2_fetch=1 //' | cut -c1-200
gzip -f $R/tests.log
cd $OUT && tar czf c13.tgz c13 && rm -rf c13
echo "total $(( $(date +%s) - T0 ))s"
