set -uo pipefail
T0=$(date +%s)
R=$OUT/c10; . scripts/gpu_call_setup.sh
cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.SharedFirstMatchesCpuReference:CudaLmHeadArgmax.*:CudaRunnerLmHeadArgmax.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -10; grep -c "router_tagged" $R/tests.log; grep -E "k2304_norm rep=0" $R/tests.log | cut -c1-160
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
echo "total $(( $(date +%s) - T0 ))s"
