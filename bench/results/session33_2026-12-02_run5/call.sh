set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 280 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRing.*:CudaRunnerPersistentMoe.Ring*' > $R/tests.log 2>&1)
TRC=$?
echo "tests rc=$TRC $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -12
grep "act_tagged" $R/tests.log | grep -c PASS
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
(cd /tmp && timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoeRing.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1)
echo "timing rc=$? $(( $(date +%s) - T0 ))s"; grep "\[metric\]" $R/timing.log | grep -E "timing" | sed -E 's/\(on 138.*//; s/op=moe_ring_//' | cut -c1-130
grep "\[metric\]" $R/timing.log | grep phase | grep -E "gate_up consumed|barrier passed|act in|first down|\"end" | sed -E 's/op=moe_ring_//; s/_producers2//' | cut -c1-140
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
for rnd in a b; do
ob def_1k_$rnd "$V2 --input-len 1024"
ob nola_1k_$rnd "$V2 --input-len 1024" DS_MOE_RING_ACT_LOOKAHEAD=0
ob s6_1k_$rnd "$V2 --input-len 1024" DS_MOE_RING_STAGES=6
ob bar_1k_$rnd "$V2 --input-len 1024" DS_MOE_RING_ACT_TAGGED=0
ob def_4k_$rnd "$V2 --input-len 4096"
ob nola_4k_$rnd "$V2 --input-len 4096" DS_MOE_RING_ACT_LOOKAHEAD=0
ob s6_4k_$rnd "$V2 --input-len 4096" DS_MOE_RING_STAGES=6
ob bar_4k_$rnd "$V2 --input-len 4096" DS_MOE_RING_ACT_TAGGED=0
done
if [ $TRC = 0 ]; then
E2E_MODELS="v2-lite v3" V2_LENS=1024,4096 V3_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 E2E_STAGES="serve onebatch roofline" PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=200 OUT=$R bash scripts/gpu_e2e.sh > $R/e2e_stdout.txt 2>&1
echo "e2e rc=$? $(( $(date +%s) - T0 ))s"; tail -25 $R/e2e_stdout.txt | cut -c1-160
fi
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
