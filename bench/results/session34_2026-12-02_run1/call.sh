set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 240 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.RingNextQBitIdentical:CudaRunnerPersistentMoe.RingActTaggedBitIdentical:CudaMoeRing.*:CudaMlaAttnPersistent.SpecializedMatchesCpuReference:CudaRunnerAttnPersistent.SpecializeBitIdentical' > $R/tests.log 2>&1)
TRC=$?
echo "tests rc=$TRC $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure|next_q graphs" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
for rnd in a b c; do
ob def_1k_$rnd "$V2 --input-len 1024"
ob nq_1k_$rnd "$V2 --input-len 1024" DS_MOE_RING_NEXT_Q=1
ob def_4k_$rnd "$V2 --input-len 4096"
ob nq_4k_$rnd "$V2 --input-len 4096" DS_MOE_RING_NEXT_Q=1
done
echo "obs $(( $(date +%s) - T0 ))s"
if [ $TRC = 0 ]; then
SW="E2E_MODELS=v2-lite V2_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=150"
mkdir -p $R/nq
env $SW DS_MOE_RING_NEXT_Q=1 E2E_RES=/tmp/e2e_res_nq E2E_STAGES="serve onebatch roofline" OUT=$R/nq bash scripts/gpu_e2e.sh > $R/nq/e2e_stdout.txt 2>&1
echo "e2e nq rc=$? $(( $(date +%s) - T0 ))s"; grep -E "rates:" $R/nq/e2e_stdout.txt | cut -c1-120
fi
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
