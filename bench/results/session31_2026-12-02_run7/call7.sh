set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
cd /tmp && timeout 330 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.*:CudaRunnerAttnPersistent.*:CudaRunnerLmHeadArgmax.*:CudaLmHeadArgmax.*:CudaRunnerFused.*:CudaRunner.Graph*:CudaMoePersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10; grep -E "moe_router_tagged" $R/tests.log | cut -c1-160
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
ob v2_1k_def "$V2 --input-len 1024"; ob v2_1k_off "$V2 --input-len 1024" DS_MOE_ROUTER_TAGGED=0
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
