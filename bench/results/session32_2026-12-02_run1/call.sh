set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
cd /tmp && timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerLmHeadArgmax.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
OUT=$OUT/c1 RING_TIMEOUT_S=120 START_TIMEOUT_S=90 bash scripts/gpu_ring_probe.sh
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
