set -uo pipefail
R=/tmp/c9; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 380 stdbuf -oL $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran|SKIPPED \] [0-9]|op=runner_overlap|op=sample case" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|\[metric\] op=(sample|runner_overlap|runner_sampling)" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -80 > $R/tests_failure_excerpt.txt
gzip -c $R/tests.log > $R/tests.log.gz; rm $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
run() { local name=$1 env=$2 args=$3; [ $(( $(date +%s) - T0 )) -gt 480 ] && { echo "skip $name"; return; }
  eval "timeout 40 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-70)"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
run g_ov "" "$B1"; run g_off "" "$B1 --disable-overlap-schedule"; run t_ov "" "$B1 --temperature 0.7"; run g_ov2 "" "$B1"; run g_off2 "" "$B1 --disable-overlap-schedule"
run v3_ov "" "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024 --output-len 64"
PORT=30123
if [ $(( $(date +%s) - T0 )) -lt 470 ]; then
  $B/dsinfer serve --model $B/data/deepseek-v2-lite --tokenizer byte --load-format dummy --num-layers 27 --device cuda \
    --host 127.0.0.1 --port $PORT --served-model-name v2-lite --max-running-requests 256 --max-num-batched-tokens 8192 > $R/server.log 2>&1 &
  pid=$!
  for i in $(seq 1 120); do python3 -c 'import urllib.request,sys; urllib.request.urlopen("http://127.0.0.1:%s/v1/models" % sys.argv[1], timeout=2)' $PORT 2>/dev/null && break; sleep 0.5; done
  for temp in 0 0.7; do
    timeout 60 $B/dsinfer bench serve --port $PORT --model v2-lite --dataset-name random --random-input-len 1024 --random-output-len 256 \
      --vocab-size 102400 --num-prompts 8 --max-concurrency 1 --warmup-requests 1 --ignore-eos --seed 7919 --temperature $temp \
      --extra-body '{"return_token_ids": true}' --disable-tqdm --output-file $R/serve_t${temp}_c1.json > $R/serve_t${temp}_c1.txt 2>&1
    echo "serve T=$temp c=1 rc=$? $(grep -E 'Output token throughput|Median TPOT' $R/serve_t${temp}_c1.txt | sed 's/  */ /g' | tr '\n' ' ') $(( $(date +%s) - T0 ))s"
  done
  kill $pid; wait $pid 2>/dev/null
fi
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call9.tgz .
