set -uo pipefail
R=$OUT/c3; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -40
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
for i in 1 2; do
  ob def4k_$i "$S4"; ob mc1_4k_$i "$S4" DS_ATTN_MERGE_COLS=1; ob mc64_4k_$i "$S4" DS_ATTN_MERGE_COLS=64
  ob def_$i "$S1"; ob mc1_$i "$S1" DS_ATTN_MERGE_COLS=1
done
ob mc1_2k "$V2 --batch-size 1 --input-len 2048" DS_ATTN_MERGE_COLS=1; ob def_2k "$V2 --batch-size 1 --input-len 2048"
echo "v2 done $(( $(date +%s) - T0 ))s"
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for L in 1024 4096; do
  ob v3def_$L "$V3 --input-len $L"
  ob v3nosm90_$L "$V3 --input-len $L" DS_MLA_DECODE_SM90=0
  ob v3sc64_$L "$V3 --input-len $L" DS_MLA_DECODE_SM90_SMALL_CHUNK=64
  ob v3sc256_$L "$V3 --input-len $L" DS_MLA_DECODE_SM90_SMALL_CHUNK=256
  ob v3var11_$L "$V3 --input-len $L" DS_MLA_DECODE_SM90_VARIANT=11
  ob v3var4_$L "$V3 --input-len $L" DS_MLA_DECODE_SM90_VARIANT=4
  ob v3cap_$L "$V3 --input-len $L" DS_MLA_DECODE_CAPACITY_PLAN=1
done
echo "v3 done $(( $(date +%s) - T0 ))s"
gzip -f $R/tests.log
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
echo "total $(( $(date +%s) - T0 ))s"
