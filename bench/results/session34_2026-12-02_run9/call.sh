set -uo pipefail
T0=$(date +%s)
R=$OUT/c9; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.*:CudaRunnerAttnPersistent.MoeSpecializeBitIdentical:CudaRunnerAttnPersistent.SpecializeBitIdentical' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -12
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
