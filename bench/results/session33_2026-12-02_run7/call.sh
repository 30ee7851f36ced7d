set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRing.*:CudaRunnerPersistentMoe.Ring*:CudaMlaAttnPersistent.SpecializedMatchesCpuReference:CudaRunnerAttnPersistent.SpecializeBitIdentical' > $R/tests.log 2>&1)
TRC=$?
echo "tests rc=$TRC $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -12
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
(cd /tmp && timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoeRing.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1)
echo "timing rc=$? $(( $(date +%s) - T0 ))s"; grep "\[metric\]" $R/timing.log | grep -E "timing" | grep -E "persistent|stages5" | sed -E 's/\(on 138.*//; s/op=moe_ring_//' | cut -c1-130
grep "\[metric\]" $R/timing.log | grep phase | grep -E "gate_up consumed|act in|\"end" | sed -E 's/op=moe_ring_//; s/_producers2//' | cut -c1-140
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
for rnd in a b c; do
ob def_1k_$rnd "$V2 --input-len 1024"
ob g128_1k_$rnd "$V2 --input-len 1024" DS_MOE_RING_GRID=128
ob def_4k_$rnd "$V2 --input-len 4096"
ob g128_4k_$rnd "$V2 --input-len 4096" DS_MOE_RING_GRID=128
done
if [ $TRC = 0 ]; then
SW="E2E_MODELS=v2-lite V2_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=150"
env $SW E2E_STAGES="serve onebatch roofline" OUT=$R bash scripts/gpu_e2e.sh > $R/e2e_stdout.txt 2>&1
echo "e2e rc=$? $(( $(date +%s) - T0 ))s"; grep -E "rates:" $R/e2e_stdout.txt | cut -c1-120
mkdir -p $R/g128
env $SW DS_MOE_RING_GRID=128 E2E_RES=/tmp/e2e_res_g128 E2E_STAGES="serve onebatch roofline" OUT=$R/g128 bash scripts/gpu_e2e.sh > $R/g128/e2e_stdout.txt 2>&1
echo "e2e g128 rc=$? $(( $(date +%s) - T0 ))s"; grep -E "rates:" $R/g128/e2e_stdout.txt | cut -c1-120
fi
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
