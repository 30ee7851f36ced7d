set -uo pipefail
R=/tmp/s25c15; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90) $(grep -c 'not applied' $R/ob_$name.log)"
}
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.*:CudaMoePersistent.*:CudaMlaAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -40
grep -E "persistent_carveout" $R/tests.log | head -4
S1="$V2 --batch-size 1 --input-len 1024"
ob new_1 "$S1"; ob drv_1 "$S1" DS_PERSISTENT_CARVEOUT=-1; ob new_2 "$S1"; ob drv_2 "$S1" DS_PERSISTENT_CARVEOUT=-1
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call15.tgz .
