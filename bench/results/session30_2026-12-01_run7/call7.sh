set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
V3="--model $B/data/deepseek-v3 --num-layers 8"
ob v3def_1024 "$V3 --batch-size 1 --input-len 1024"; ob v3def_4096 "$V3 --batch-size 1 --input-len 4096"
cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRouterRoute.*:CudaRunnerRouterRoute.*:CudaRouterGemv*:CudaMoeRouting*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10; grep -E 'path ran' $R/tests.log | head -4
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
