set -uo pipefail
R=/tmp/c13; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 120 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.DownSmemBitIdentical:CudaMoePersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
run() { local name=$1 env=$2 args=$3
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
for i in 1 2 3; do run def$i "" "$B1"; run ds7_$i "DS_MOE_DOWN_SMEM=7" "$B1"; done
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call13.tgz .
