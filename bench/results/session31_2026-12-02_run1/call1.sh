set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
ls /usr/local/cuda/bin > $R/cuda_bin.txt 2>&1; (which nsys; ls -d /opt/nvidia/nsight* /usr/local/cuda/nsight* 2>/dev/null) > $R/nsys_where.txt 2>&1
NSYS=$(which nsys 2>/dev/null || ls /usr/local/cuda/bin/nsys 2>/dev/null || ls /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys=$NSYS"
cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRouterRoute.*:CudaRunnerRouterRoute.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
python3 bench/gpu_rates.py --output-file "$R/gpu_rates.json" > "$R/gpu_rates.txt" 2>&1; tail -1 $R/gpu_rates.txt
ob v2_1k_a "$V2 --input-len 1024"; ob v2_4k_a "$V2 --input-len 4096"
if [ -n "$NSYS" ]; then
  timeout 120 $NSYS profile -t cuda --cuda-graph-trace=node -o $R/v2_1k --force-overwrite true \
    $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --input-len 1024 --output-len 24 > $R/nsys_run.log 2>&1
  echo "nsys rc=$? $(( $(date +%s) - T0 ))s"
  timeout 120 $NSYS stats --report cuda_gpu_trace --format csv -o $R/v2_1k $R/v2_1k.nsys-rep > $R/nsys_stats.log 2>&1
  echo "stats rc=$?"; ls -la $R | head -30; gzip -f $R/*.csv; rm -f $R/*.sqlite
  gzip -f $R/v2_1k.nsys-rep
else
  NCU=/usr/local/cuda/bin/ncu
  timeout 200 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:"Persistent|LmHead|Embedding|RmsNorm|Argmax|Gather|Sampl|Copy" \
    $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --input-len 1024 --output-len 3 \
    > $R/ncu_v2_1k.csv 2> $R/ncu_v2_1k_stderr.txt
  echo "ncu rc=$? $(( $(date +%s) - T0 ))s"
  python3 bench/ncu_summary.py $R/ncu_v2_1k.csv > $R/ncu_v2_1k_summary.txt 2>&1; head -30 $R/ncu_v2_1k_summary.txt; gzip -f $R/ncu_v2_1k.csv
fi
ob v2_1k_b "$V2 --input-len 1024"
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
