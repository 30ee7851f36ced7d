set -uo pipefail
R=/tmp/s24c10; . scripts/gpu_call_setup.sh
xz -dc .carry/dsinfer_prev.xz > $B/dsinfer_prev && chmod +x $B/dsinfer_prev
T0=$(date +%s)
PORT=30124
serve_run() {  # binary, label, concurrencies...
local bin=$1 lab=$2; shift 2
$B/$bin serve --model $B/data/deepseek-v2-lite --tokenizer byte --load-format dummy --num-layers 27 --device cuda \
  --host 127.0.0.1 --port $PORT --served-model-name v2-lite --max-running-requests 256 --max-num-batched-tokens 8192 > $R/server_$lab.log 2>&1 &
pid=$!
for i in $(seq 1 120); do python3 -c 'import urllib.request,sys; urllib.request.urlopen("http://127.0.0.1:%s/v1/models" % sys.argv[1], timeout=2)' $PORT 2>/dev/null && break; sleep 0.5; done
for c in "$@"; do
  n=$(( c == 1 ? 8 : 128 ))
  timeout 90 $B/dsinfer bench serve --port $PORT --model v2-lite --dataset-name random --random-input-len 1024 --random-output-len 256 \
    --vocab-size 102400 --num-prompts $n --max-concurrency $c --warmup-requests $(( c < 8 ? c : 8 )) --ignore-eos --seed $(( c * 7919 + 1024 )) \
    --extra-body '{"return_token_ids": true}' --disable-tqdm --output-file $R/serve_${lab}_c${c}.json > $R/serve_${lab}_c${c}.txt 2>&1
  echo "serve $lab c=$c rc=$? $(grep -E 'Output token throughput|Median TPOT|Median TTFT' $R/serve_${lab}_c${c}.txt | sed 's/  */ /g' | tr '\n' ' ') $(( $(date +%s) - T0 ))s"
done
kill $pid; wait $pid 2>/dev/null
}
serve_run dsinfer new 1 64
serve_run dsinfer_prev prev 1
serve_run dsinfer new2 1
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call10.tgz .
