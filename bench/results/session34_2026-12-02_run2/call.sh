set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.L2NextBitIdentical:CudaRunnerPersistentMoe.RingActTaggedBitIdentical:CudaMlaAttnPersistent.SpecializedMatchesCpuReference:CudaRunnerAttnPersistent.SpecializeBitIdentical' > $R/tests.log 2>&1)
TRC=$?
echo "tests rc=$TRC $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure|l2_next graphs" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
for rnd in a b; do
for L in 1k 4k; do
IL=1024; [ $L = 4k ] && IL=4096
ob def_${L}_$rnd "$V2 --input-len $IL"
ob r1_${L}_$rnd "$V2 --input-len $IL" DS_MOE_RING_L2_NEXT=1
ob r2_${L}_$rnd "$V2 --input-len $IL" DS_MOE_RING_L2_NEXT=2
ob a1_${L}_$rnd "$V2 --input-len $IL" DS_ATTN_L2_NEXT=1
ob a2_${L}_$rnd "$V2 --input-len $IL" DS_ATTN_L2_NEXT=2
ob a1p1_${L}_$rnd "$V2 --input-len $IL" DS_ATTN_L2_NEXT=1 DS_ATTN_L2_NEXT_POINT=1
ob r1a1_${L}_$rnd "$V2 --input-len $IL" DS_MOE_RING_L2_NEXT=1 DS_ATTN_L2_NEXT=1
done
done
echo "obs $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
