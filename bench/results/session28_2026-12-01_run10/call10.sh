set -uo pipefail
R=$OUT/c10; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
for i in 1 2 3; do ob def_$i "$S1"; ob moe2_$i "$S1" DS_MOE_SPECIALIZE=2; ob attn2_$i "$S1" DS_ATTN_SPECIALIZE=2; ob both2_$i "$S1" DS_MOE_SPECIALIZE=2 DS_ATTN_SPECIALIZE=2; done
ob moe0_1 "$S1" DS_MOE_SPECIALIZE=0; ob moe0_2 "$S1" DS_MOE_SPECIALIZE=0
ob def4k "$S4"; ob moe2_4k "$S4" DS_MOE_SPECIALIZE=2; ob both2_4k "$S4" DS_MOE_SPECIALIZE=2 DS_ATTN_SPECIALIZE=2
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 100 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerAttnPersistent.MoeSpecializeBitIdentical' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -E "moe_specialize" $R/tests.log | head -8
grep -B3 -A12 "Failure" $R/tests.log | head -30
gzip -f $R/tests.log
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
echo "total $(( $(date +%s) - T0 ))s"
