set -uo pipefail
R=/tmp/c6; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaSampling.*:CudaRunner.OverlapLaunchMatchesSerialForward:CudaRunner.DeviceSamplingMatchesCpuSample:CudaRunner.GenerateBench*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|op=runner_overlap|op=sample|op=runner_sampling" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|\[metric\]" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
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
  python3 -c 'import urllib.request,sys; print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode())' $PORT 2>/dev/null | grep -E "overlapped_steps_total|engine_steps_total" | grep -v "^#" > $R/metrics_$mode.txt
  cat $R/metrics_$mode.txt | tr '\n' ' '; echo
  kill $pid; wait $pid 2>/dev/null
}
serve_pt t07_overlap_devsort "" "" 0.7
serve_pt t07_overlap_segsort "DS_SAMPLE_DEVICE_SORT=0" "" 0.7
serve_pt t07_serial_devsort "" "--disable-overlap-schedule" 0.7
serve_pt t0_overlap "" "" 0
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call6.tgz .
