set -uo pipefail
R=/tmp/c18; . scripts/gpu_call_setup.sh

T0=$(date +%s)
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*:CudaRunnerAttnPersistent.*:CudaRunnerPdl.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
run() { local name=$1 bin=$2 env=$3 args=$4
  eval "timeout 60 env $env $B/$bin bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$bin $env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
for i in 1 2 3; do run new$i dsinfer "" "$B1"; done
run new_bps1 dsinfer "DS_PERSISTENT_MOE_BPS=1" "$B1"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call18.tgz .
