set -uo pipefail
R=/tmp/s24c14; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaRunner.Overlap*:CudaRunner.*Graph*:CudaSampling.*:CudaStreamPattern.DISABLED_Report' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|op=stream_pattern|op=runner_overlap" $R/tests.log | head -30
timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 --model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 64 --output-file $R/ob.json > $R/ob.log 2>&1
echo "ob rc=$? $(grep -E 'median step' $R/ob.log | head -1 | cut -c1-90)"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call14.tgz .
