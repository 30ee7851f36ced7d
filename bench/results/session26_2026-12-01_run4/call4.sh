set -uo pipefail
R=/tmp/s26c4; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 300 $B/dsinfer_cuda_tests --gtest_filter='CudaRunner.*:CudaSampling*:CudaEmbedding.*' > $R/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/tests.log | tr '\n' ' ') $(( $(date +%s) - T0 ))s"
grep -E "\[metric\] op=(runner_overlap|sample case=argmax)" $R/tests.log
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED" $R/tests.log > $R/tests_summary.txt
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do ob new_$i "$S1"; ob old_$i "$S1" DS_GRAPH_IO=0; done
ob new_4k "$V2 --batch-size 1 --input-len 4096"
PORT=30125
$B/dsinfer serve --model $B/data/deepseek-v2-lite --tokenizer byte --load-format dummy --num-layers 27 --device cuda \
  --host 127.0.0.1 --port $PORT --served-model-name v2-lite --max-running-requests 256 --max-num-batched-tokens 8192 > $R/server.log 2>&1 &
pid=$!
for i in $(seq 1 120); do python3 -c 'import urllib.request,sys; urllib.request.urlopen("http://127.0.0.1:%s/v1/models" % sys.argv[1], timeout=2)' $PORT 2>/dev/null && break; sleep 0.5; done
for c in 1 64; do
  n=$(( c == 1 ? 8 : 256 ))
  timeout 120 $B/dsinfer bench serve --port $PORT --model v2-lite --dataset-name random --random-input-len 1024 --random-output-len 256 \
    --vocab-size 102400 --num-prompts $n --max-concurrency $c --warmup-requests 1 --ignore-eos --seed 8943 \
    --extra-body '{"return_token_ids": true}' --disable-tqdm --output-file $R/serve_c$c.json > $R/serve_c$c.txt 2>&1
  echo "serve c=$c rc=$? $(grep -E 'Successful requests|Output token throughput|Median TPOT|Median TTFT' $R/serve_c$c.txt | sed 's/  */ /g' | tr '\n' ' ') $(( $(date +%s) - T0 ))s"
done
kill $pid; wait $pid 2>/dev/null
grep -ciE "error|check failed" $R/server.log
gzip -f $R/tests.log
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call4.tgz .
