set -uo pipefail
R=/tmp/c7; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaSampling.*:CudaRunner.OverlapLaunchMatchesSerialForward:CudaRunner.DeviceSamplingMatchesCpuSample' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|op=runner_overlap|op=sample|op=runner_sampling" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|\[metric\]" $R/tests.log > $R/tests_summary.txt
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
run() { local name=$1 env=$2 args=$3; [ $(( $(date +%s) - T0 )) -gt 200 ] && { echo "skip $name"; return; }
  eval "timeout 40 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-60) | $(grep -o 'medians in us.*' $R/ob_$name.log)"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
B64="$V2 --batch-size 64 --input-len 1024 --output-len 32"
OFF="--disable-overlap-schedule"
TL="DS_STEP_TIMELINE=1"
run g_ov "$TL" "$B1"; run t_ov "$TL" "$B1 --temperature 0.7"; run t_off "$TL" "$B1 --temperature 0.7 $OFF"; run t_seg "$TL DS_SAMPLE_DEVICE_SORT=0" "$B1 --temperature 0.7"
run g_ov64 "$TL" "$B64"; run t_ov64 "$TL" "$B64 --temperature 0.7"; run t_seg64 "$TL DS_SAMPLE_DEVICE_SORT=0" "$B64 --temperature 0.7"
run g_ov_2 "" "$B1"; run t_ov_2 "" "$B1 --temperature 0.7"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call7.tgz .
