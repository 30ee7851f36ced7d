set -uo pipefail
T0=$(date +%s)
R=$OUT/c8; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 240 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.*:CudaMoeRing.*' > $R/tests.log 2>&1)
TRC=$?
echo "tests rc=$TRC $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -12
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
mkdir -p $R/rates
for i in 1 2 3; do python3 bench/gpu_rates.py --output-file $R/rates/before_$i.json > /dev/null 2>&1; done
if [ $TRC = 0 ]; then
E2E_MODELS="v2-lite v3" V2_LENS=1024,4096 V3_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 E2E_STAGES="serve onebatch roofline" PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=200 OUT=$R bash scripts/gpu_e2e.sh > $R/e2e_stdout.txt 2>&1
echo "e2e rc=$? $(( $(date +%s) - T0 ))s"; grep -E "rates:" $R/e2e_stdout.txt | head -1 | cut -c1-120
grep -E "^## |^\| 1 \|" $R/summary.md | head -8
fi
for i in 1 2 3; do python3 bench/gpu_rates.py --output-file $R/rates/after_$i.json > /dev/null 2>&1; done
echo "rates $(( $(date +%s) - T0 ))s: $(python3 -c 'import json,glob; print([round(json.load(open(f))["mem_bw_gbps"]) for f in sorted(glob.glob("'$R'/rates/*.json"))])')"
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
echo "total $(( $(date +%s) - T0 ))s"
