set -uo pipefail
R=$OUT/c1; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="$V2 --batch-size 1 --input-len 1024"
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaTransposeBf16.*:CudaRunnerPersistentMoe.FusedDown*' > $R/new_tests.log 2>&1
echo "new tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/new_tests.log | head
grep -B2 -A10 "Failure" $R/new_tests.log | head -60
for i in 1 2 3; do ob fd_$i "$S1" DS_MOE_FUSED_DOWN=1; ob def_$i "$S1"; done
ob fd_4k "$V2 --batch-size 1 --input-len 4096" DS_MOE_FUSED_DOWN=1; ob def_4k "$V2 --batch-size 1 --input-len 4096"
ob fd_b8 "$V2 --batch-size 8 --input-len 1024" DS_MOE_FUSED_DOWN=1
echo "one-batch done $(( $(date +%s) - T0 ))s"
timeout 150 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=moe_persistent_timing|op=moe_persistent_phase" $R/timing.log | grep -v "start skew" | sed 's/case=V2Lite //; s/gu_ksplit=8 shared_first=1 l2_fetch=1 //' | cut -c1-200
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
