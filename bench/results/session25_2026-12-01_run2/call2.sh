set -uo pipefail
R=/tmp/s25c2; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaStreamPattern.DISABLED_StartReport' > $R/start.log 2>&1
echo "start rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=stream_start|FAIL|rror" $R/start.log | sed 's/\[metric\] op=stream_start //'
tar -C $R -czf $OUT/call2.tgz .
