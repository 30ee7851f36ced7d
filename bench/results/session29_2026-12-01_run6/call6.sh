set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for i in 1 2; do
  for L in 1024 4096; do
    ob v3def_${L}_$i "$V3 --input-len $L"
    ob v3pre_${L}_$i "$V3 --input-len $L" DS_MLA_UV_PRELOAD=1
    ob v3qabs_${L}_$i "$V3 --input-len $L" DS_Q_ABSORB=1
  done
done
ob v3var4_4096 "$V3 --input-len 4096" DS_MLA_DECODE_SM90_VARIANT=4
ob v3all_4096 "$V3 --input-len 4096" DS_MLA_UV_PRELOAD=1 DS_Q_ABSORB=1
ob v3all_1024 "$V3 --input-len 1024" DS_MLA_UV_PRELOAD=1 DS_Q_ABSORB=1
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 240 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunner*:CudaMultiDevice*:CudaMoeCombineNorm.*:CudaMlaDecodeUv.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -10
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -40 > $R/tests_failure_excerpt.txt; head -c 2000 $R/tests_failure_excerpt.txt
gzip -f $R/tests.log
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
