set -uo pipefail
T0=$(date +%s)
R=$OUT/c8; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 330 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunner*:CudaMla*:CudaMoeRing.*:CudaLmHeadArgmax.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
echo "total $(( $(date +%s) - T0 ))s"
