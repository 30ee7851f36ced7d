set -uo pipefail
R=$OUT/c10; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 100 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRing.*:CudaRunnerPersistentMoe.Ring*:CudaRunnerPersistentMoe.DenseWithinBounds' > $R/tests.log 2>&1)
echo "tests rc=$?"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -8
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
