set -uo pipefail
T0=$(date +%s)
R=$OUT/c4; . scripts/gpu_call_setup.sh
cd /tmp && timeout 200 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoeRouterRoute.*' > $R/tests.log 2>&1; echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests.log)"
grep timing $R/tests.log
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
