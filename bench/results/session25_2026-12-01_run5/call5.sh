set -uo pipefail
R=/tmp/s25c5; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaStreamPattern.DISABLED_SmemReport' > $R/smem.log 2>&1
echo "smem rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=stream_smem|FAIL|rror" $R/smem.log | sed 's/\[metric\] op=stream_smem //'
tar -C $R -czf $OUT/call5.tgz .
