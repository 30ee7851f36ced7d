set -uo pipefail
R=$OUT/c9; . scripts/gpu_call_setup.sh
T0=$(date +%s)
obo() {  # ob on the previous commit's binary (739c453)
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 "$B/dsinfer_old" bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file "$R/ob_$name.json" > "$R/ob_$name.log" 2>&1
  echo "$name rc=$? $(grep -E 'median step' "$R/ob_$name.log" | head -1 | cut -c1-90)"
}
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
for i in 1 2 3; do obo old_$i "$S1"; ob new_$i "$S1"; ob moesp_$i "$S1" DS_MOE_SPECIALIZE=1; done
for i in 1 2; do obo old4k_$i "$S4"; ob new4k_$i "$S4"; ob moesp4k_$i "$S4" DS_MOE_SPECIALIZE=1; done
ob new_b8 "$V2 --batch-size 8 --input-len 1024"; ob moesp_b8 "$V2 --batch-size 8 --input-len 1024" DS_MOE_SPECIALIZE=1
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 300 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*:CudaRunnerAttnPersistent.MoeSpecializeBitIdentical' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -E "moe_specialize" $R/tests.log | head -4
grep -B3 -A12 "Failure" $R/tests.log | head -30
timeout 120 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=moe_persistent_timing" $R/timing.log | cut -c1-220 | head -12
gzip -f $R/tests.log
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
echo "total $(( $(date +%s) - T0 ))s"
