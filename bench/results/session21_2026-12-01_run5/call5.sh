set -uo pipefail
R=/tmp/c5; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 120 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaStreamPattern.DISABLED_Report' > $R/stream.log 2>&1
echo "stream rc=$? $(( $(date +%s) - T0 ))s"; grep -E "metric|FAILED|Failure" $R/stream.log | sed 's/.*op=stream_pattern //'
timeout 100 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/moe_timing.log 2>&1
echo "moe timing rc=$? $(( $(date +%s) - T0 ))s"; grep -E "moe_persistent_timing" $R/moe_timing.log | cut -c1-200
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call5.tgz .
