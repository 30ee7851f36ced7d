set -uo pipefail
T0=$(date +%s)
R=$OUT/c4; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=0f timeout 420 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunner.DummyV3DecodeSm90*:CudaRunner.Graph*:CudaRunnerFusedUv.*:CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED  \] [0-9]" $R/tests.log | head -20
grep -E "q_bf16 vs q: differing" $R/tests.log | cut -c1-170
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
