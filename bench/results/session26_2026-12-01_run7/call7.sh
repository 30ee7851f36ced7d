set -uo pipefail
R=/tmp/c7; . scripts/gpu_call_setup.sh
timeout 60 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerFused.*:CudaRunnerLmHeadArgmax.*' > $R/tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[ +(OK|FAILED) +\]|^\[  PASSED|^\[  FAILED" $R/tests.log | tee $R/tests_summary.txt
grep -E "\[fixture\].*(norm|lm_head)" $R/tests.log | cut -c1-200 | head -12
gzip -f $R/tests.log; tar -C $R -czf $OUT/call7.tgz .
