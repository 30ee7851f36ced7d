set -uo pipefail
R=/tmp/c8; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaSampling.*:CudaRunner.OverlapLaunchMatchesSerialForward:CudaRunner.DeviceSamplingMatchesCpuSample' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|op=runner_overlap|op=sample|op=runner_sampling" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|\[metric\]" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
run() { local name=$1 env=$2 args=$3; [ $(( $(date +%s) - T0 )) -gt 200 ] && { echo "skip $name"; return; }
  eval "timeout 40 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-60) | $(grep -o 'medians in us.*' $R/ob_$name.log)"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
B64="$V2 --batch-size 64 --input-len 1024 --output-len 32"
TL="DS_STEP_TIMELINE=1"
run g_ov "$TL" "$B1"; run t_ov "$TL" "$B1 --temperature 0.7"; run t_seg "$TL DS_SAMPLE_DEVICE_SORT=0" "$B1 --temperature 0.7"
run g_ov64 "$TL" "$B64"; run t_ov64 "$TL" "$B64 --temperature 0.7"; run t_seg64 "$TL DS_SAMPLE_DEVICE_SORT=0" "$B64 --temperature 0.7"
run t_ov_2 "" "$B1 --temperature 0.7"; run t_off_2 "" "$B1 --temperature 0.7 --disable-overlap-schedule"; run g_ov_2 "" "$B1"
PORT=30123
serve_pt() {  # mode env flags temperature
  local mode=$1 envs=$2 flags=$3 temp=$4
  env $envs $B/dsinfer serve --model $B/data/deepseek-v2-lite --tokenizer byte --load-format dummy --num-layers 27 --device cuda \
    --host 127.0.0.1 --port $PORT --served-model-name v2-lite --max-running-requests 256 --max-num-batched-tokens 8192 $flags > $R/server_$mode.log 2>&1 &
  local pid=$!
  for i in $(seq 1 120); do python3 -c 'import urllib.request,sys; urllib.request.urlopen("http://127.0.0.1:%s/v1/models" % sys.argv[1], timeout=2)' $PORT 2>/dev/null && break; sleep 0.5; done
  for c in 1 64; do
    local n=$(( c < 8 ? 8 : c ))
    timeout 120 $B/dsinfer bench serve --port $PORT --model v2-lite --dataset-name random --random-input-len 1024 --random-output-len 256 \
      --vocab-size 102400 --num-prompts $n --max-concurrency $c --warmup-requests 1 --ignore-eos --seed $((c * 7919)) --temperature $temp \
      --extra-body '{"return_token_ids": true}' --disable-tqdm --output-file $R/serve_${mode}_c$c.json > $R/serve_${mode}_c$c.txt 2>&1
    echo "$mode c=$c rc=$? $(grep -E 'Output token throughput|Median TPOT|Median TTFT' $R/serve_${mode}_c$c.txt | sed 's/  */ /g' | tr '\n' ' ') $(( $(date +%s) - T0 ))s"
  done
  kill $pid; wait $pid 2>/dev/null
}
serve_pt t07_overlap "" "" 0.7
serve_pt t07_serial "" "--disable-overlap-schedule" 0.7
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call8.tgz .
