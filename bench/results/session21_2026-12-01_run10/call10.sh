set -uo pipefail
R=/tmp/c10; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 220 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaMoePersistent.*:CudaRunnerAttnPersistent.*:CudaRunnerPersistentMoe.*:CudaMlaQAbsorb*:CudaRunnerQAbsorb*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
V3='--model $B/data/deepseek-v3 --num-layers 8'
run() { local name=$1 env=$2 args=$3
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
run v2_1 "" "$B1"; run v2_tf1 "DS_PERSISTENT_MOE_TAIL_FOLD=1" "$B1"; run v2_2 "" "$B1"; run v2_3 "" "$B1"
run v2_4k "" "$V2 --batch-size 1 --input-len 4096 --output-len 64"
run v2_1k_out256 "" "$V2 --batch-size 1 --input-len 1024 --output-len 256"
run v3_1 "" "$V3 --batch-size 1 --input-len 1024 --output-len 64"; run v3_2 "" "$V3 --batch-size 1 --input-len 1024 --output-len 64"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call10.tgz .
