set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
V3="--model $B/data/deepseek-v3 --num-layers 8"
ob v3def_1024 "$V3 --batch-size 1 --input-len 1024"; ob v3slow_1024 "$V3 --batch-size 1 --input-len 1024" DS_ROUTER_ROUTE_FAST=0
ob v3def_4096 "$V3 --batch-size 1 --input-len 4096"; ob v3slow_4096 "$V3 --batch-size 1 --input-len 4096" DS_ROUTER_ROUTE_FAST=0
echo "obs done $(( $(date +%s) - T0 ))s"
LEFT=$(( 200 - ($(date +%s) - T0) ))
E2E_MODELS="v2-lite v3" V2_LENS=1024,4096 V3_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 E2E_STAGES="serve onebatch roofline" \
  PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=$LEFT bash scripts/gpu_e2e.sh > $R/gpu_e2e_out.txt 2>&1
echo "sweep rc=$? $(( $(date +%s) - T0 ))s"; tail -6 $R/gpu_e2e_out.txt
cd /tmp && timeout 140 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerRouterRoute.*:CudaMoeRouterRoute.*:CudaRunnerFp8GemvExperts.*:CudaRunnerCombineNormSplit.*:CudaRunnerFused.*:CudaRunnerFp8Gemv.*:CudaRunnerGraphs*:CudaRunner.Graph*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head -10
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; wc -l < $R/tests_summary.txt
gzip -f $R/tests.log
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
