set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
V2="--model $B/data/deepseek-v2-lite --num-layers 27"; V3="--model $B/data/deepseek-v3 --num-layers 8"
ob v3def_1024 "$V3 --batch-size 1 --input-len 1024"; ob v3off_1024 "$V3 --batch-size 1 --input-len 1024" DS_COMBINE_NORM_SPLIT=0
ob v3def_4096 "$V3 --batch-size 1 --input-len 4096"; ob v3off_4096 "$V3 --batch-size 1 --input-len 4096" DS_COMBINE_NORM_SPLIT=0
ob v3def_b8 "$V3 --batch-size 8 --input-len 1024"; ob v3off_b8 "$V3 --batch-size 8 --input-len 1024" DS_COMBINE_NORM_SPLIT=0
ob v2def_b8 "$V2 --batch-size 8 --input-len 1024"; ob v2split_b8 "$V2 --batch-size 8 --input-len 1024" DS_COMBINE_NORM_SPLIT_MIN_HIDDEN=0
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerFusedUv.*:CudaRunnerCombineNormSplit.*:CudaMoeCombineNorm.*:CudaRunnerFused.*:CudaRunnerDownCombine.*:CudaRunnerFp8Gemv.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head -10
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt
gzip -f $R/tests.log
LEFT=$(( 440 - ($(date +%s) - T0) ))
echo "sweep limit ${LEFT}s"
E2E_MODELS="v2-lite v3" V2_LENS=1024,4096 V3_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 E2E_STAGES="serve onebatch roofline" \
  PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=$LEFT bash scripts/gpu_e2e.sh > $R/gpu_e2e_out.txt 2>&1
echo "sweep rc=$? $(( $(date +%s) - T0 ))s"; tail -15 $R/gpu_e2e_out.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
