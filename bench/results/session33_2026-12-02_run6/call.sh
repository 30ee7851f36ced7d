set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 300 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.*:CudaMoeRing.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1)
TRC=$?
echo "tests rc=$TRC $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -12
grep -c "q_tagged" $R/tests.log
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
for rnd in a b c; do
ob def_1k_$rnd "$V2 --input-len 1024"
ob qt_1k_$rnd "$V2 --input-len 1024" DS_ATTN_Q_TAGGED=1
ob def_4k_$rnd "$V2 --input-len 4096"
ob qt_4k_$rnd "$V2 --input-len 4096" DS_ATTN_Q_TAGGED=1
done
if [ $TRC = 0 ]; then
DS_ATTN_Q_TAGGED=1 E2E_MODELS="v2-lite v3" V2_LENS=1024,4096 V3_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 E2E_STAGES="serve onebatch roofline" PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=200 OUT=$R bash scripts/gpu_e2e.sh > $R/e2e_stdout.txt 2>&1
echo "e2e rc=$? $(( $(date +%s) - T0 ))s"; tail -25 $R/e2e_stdout.txt | grep -E "rates|records|done" | cut -c1-160
fi
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
