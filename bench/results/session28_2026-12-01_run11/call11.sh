set -uo pipefail
R=$OUT/c11; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
for i in 1 2 3; do ob def_$i "$S1"; done
for i in 1 2; do ob def4k_$i "$S4"; done
ob form1 "$S1" DS_MOE_SPECIALIZE=1 DS_ATTN_SPECIALIZE=1
ob generic "$S1" DS_MOE_SPECIALIZE=0 DS_ATTN_SPECIALIZE=0
ob def_b8 "$V2 --batch-size 8 --input-len 1024"
ob v3_8l "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"
echo "obs done $(( $(date +%s) - T0 ))s"
EXCL='CudaGroupedGemmSm90Mixed.*:CudaGroupedGemmSm90.*:CudaSkinnyGemm.*:CudaFp8GemmWgmmaSm90.*:CudaMlaDecodeSm90.*:CudaGemm.*:CudaMlaPrefillSm90.*:CudaMoeExperts.*:CudaEmbedding.*:CudaFp8GemmSm90.*:CudaGroupedGemm.*:CudaMlaPrefillTc.*'
timeout 280 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter="-$EXCL" > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
head -c 2500 $R/tests_failure_excerpt.txt
gzip -f $R/tests.log
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
echo "total $(( $(date +%s) - T0 ))s"
