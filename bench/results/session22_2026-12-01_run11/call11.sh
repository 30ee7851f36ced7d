set -uo pipefail
R=/tmp/c11; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*:CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.*:CudaGridBarrier.*:CudaMlaDecode.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head -20
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
for i in 1 2; do timeout 30 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --batch-size 1 --input-len 1024 --output-len 64 --output-file $R/ob_v2_$i.json > $R/ob_v2_$i.log 2>&1; echo "v2_$i rc=$? $(grep -E 'median step' $R/ob_v2_$i.log | head -1)"; done
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call11.tgz .
