set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
V3="--model $B/data/deepseek-v3 --num-layers 8"
ob v3def_b1_1024 "$V3 --batch-size 1 --input-len 1024"; ob v3var4_b1_1024 "$V3 --batch-size 1 --input-len 1024" DS_MLA_DECODE_SM90_VARIANT=4
ob v3def_b1_4096 "$V3 --batch-size 1 --input-len 4096"; ob v3var4_b1_4096 "$V3 --batch-size 1 --input-len 4096" DS_MLA_DECODE_SM90_VARIANT=4
ob v3nopre_b1_4096 "$V3 --batch-size 1 --input-len 4096" DS_MLA_UV_PRELOAD=0
ob v3def_b8 "$V3 --batch-size 8 --input-len 1024"; ob v3var4_b8 "$V3 --batch-size 8 --input-len 1024" DS_MLA_DECODE_SM90_VARIANT=4
OB_TIMEOUT=90 ob v3def_b64 "$V3 --batch-size 64 --input-len 1024"; OB_TIMEOUT=90 ob v3var4_b64 "$V3 --batch-size 64 --input-len 1024" DS_MLA_DECODE_SM90_VARIANT=4
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 60 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeUv.*:CudaRunnerFusedUv.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
