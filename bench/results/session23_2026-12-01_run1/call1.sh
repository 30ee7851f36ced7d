set -uo pipefail
R=/tmp/c1; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunner.OverlapLaunchMatchesSerialForward:CudaRunner.DeviceSamplingMatchesCpuSample:CudaRunner.GenerateBench*:CudaRunnerPdl.*:CudaRunnerAttnPersistent.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|op=runner_overlap" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|op=runner_overlap" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
V3="--model $B/data/deepseek-v3 --num-layers 8"
run() { local name=$1 args=$2; [ $(( $(date +%s) - T0 )) -gt 330 ] && { echo "skip $name"; return; }
  timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
OFF="--disable-overlap-schedule"
run ov_1 "$B1"; run off_1 "$B1 $OFF"; run ov_2 "$B1"; run off_2 "$B1 $OFF"; run ov_3 "$B1"; run off_3 "$B1 $OFF"
run ov_4k "$V2 --batch-size 1 --input-len 4096 --output-len 64"; run off_4k "$V2 --batch-size 1 --input-len 4096 --output-len 64 $OFF"
run v3_ov "$V3 --batch-size 1 --input-len 1024 --output-len 64"; run v3_off "$V3 --batch-size 1 --input-len 1024 --output-len 64 $OFF"
run ov_b8 "$V2 --batch-size 8 --input-len 1024 --output-len 64"; run off_b8 "$V2 --batch-size 8 --input-len 1024 --output-len 64 $OFF"
echo "one-batch done $(( $(date +%s) - T0 ))s"
E2E_MODELS="v2-lite" V2_LENS=1024 CONCURRENCY="1" E2E_STAGES="serve" PROFILE_MODELS=none PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=10 SCRIPT_LIMIT_S=140 bash scripts/gpu_e2e.sh > $R/gpu_e2e_overlap.txt 2>&1
echo "serve(overlap) rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| *1 " $OUT/summary.md | head -3
mkdir -p $R/serve_overlap; for f in summary.md e2e.json gpu_e2e.txt e2e_results.tgz; do [ -f $OUT/$f ] && mv $OUT/$f $R/serve_overlap/; done
if [ $(( $(date +%s) - T0 )) -lt 420 ]; then
SERVE_ARGS="--max-running-requests 256 --max-num-batched-tokens 8192 --disable-overlap-schedule" E2E_RES=/tmp/e2e_off E2E_MODELS="v2-lite" V2_LENS=1024 CONCURRENCY="1" E2E_STAGES="serve" PROFILE_MODELS=none PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=10 SCRIPT_LIMIT_S=140 bash scripts/gpu_e2e.sh > $R/gpu_e2e_serial.txt 2>&1
echo "serve(serial) rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| *1 " $OUT/summary.md | head -3
mkdir -p $R/serve_serial; for f in summary.md e2e.json gpu_e2e.txt e2e_results.tgz; do [ -f $OUT/$f ] && mv $OUT/$f $R/serve_serial/; done
fi
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call1.tgz .
