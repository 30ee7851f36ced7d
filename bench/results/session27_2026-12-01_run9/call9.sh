set -uo pipefail
R=$OUT/c9; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
for i in 1 2 3; do ob def_$i "$V2 --batch-size 1 --input-len 1024"; done
ob def_4k "$V2 --batch-size 1 --input-len 4096"
ob v3_8l "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"
timeout 200 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=moe_persistent_timing" $R/timing.log | sed 's/case=V2Lite //; s/gu_ksplit=8 shared_first=1 l2_fetch=1 //' | cut -c1-250
timeout 420 stdbuf -oL $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -80 > $R/tests_failure_excerpt.txt
head -c 3000 $R/tests_failure_excerpt.txt
gzip -f $R/tests.log
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
echo "total $(( $(date +%s) - T0 ))s"
