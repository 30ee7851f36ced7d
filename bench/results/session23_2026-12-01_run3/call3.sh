set -uo pipefail
R=/tmp/c3; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 360 stdbuf -oL $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran|SKIPPED \] [0-9]|op=runner_overlap" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -80 > $R/tests_failure_excerpt.txt
S="E2E_MODELS=v2-lite V2_LENS=1024 E2E_STAGES=serve PROFILE_MODELS=none PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=10"
if [ $(( $(date +%s) - T0 )) -lt 420 ]; then
env $S CONCURRENCY="1 8 64" SCRIPT_LIMIT_S=90 bash scripts/gpu_e2e.sh > $R/gpu_e2e_overlap.txt 2>&1
echo "serve(overlap) rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| *[0-9]+ " $OUT/summary.md | head -4
mkdir -p $R/serve_overlap; for f in summary.md e2e.json gpu_e2e.txt e2e_results.tgz; do [ -f $OUT/$f ] && mv $OUT/$f $R/serve_overlap/; done
fi
if [ $(( $(date +%s) - T0 )) -lt 500 ]; then
env $S CONCURRENCY="8 64" SCRIPT_LIMIT_S=75 E2E_RES=/tmp/e2e_off SERVE_ARGS="--max-running-requests 256 --max-num-batched-tokens 8192 --disable-overlap-schedule" bash scripts/gpu_e2e.sh > $R/gpu_e2e_serial.txt 2>&1
echo "serve(serial) rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| *[0-9]+ " $OUT/summary.md | head -4
mkdir -p $R/serve_serial; for f in summary.md e2e.json gpu_e2e.txt e2e_results.tgz; do [ -f $OUT/$f ] && mv $OUT/$f $R/serve_serial/; done
fi
rm -f $OUT/*.svg
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call3.tgz .
