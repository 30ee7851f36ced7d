set -uo pipefail
R=/tmp/s26c1; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaEmbedding.*:CudaRunner.Overlap*' > $R/tests_gio.log 2>&1
echo "tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/tests_gio.log | tr '\n' ' ') $(( $(date +%s) - T0 ))s"
grep "\[metric\] op=runner_overlap" $R/tests_gio.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do
  ob def_$i "$S1"
  ob gio_$i "$S1" DS_GRAPH_IO=1
done
ob tl_def "$S1" DS_STEP_TIMELINE=1; grep "step timeline" $R/ob_tl_def.log | cut -c1-400
ob tl_gio "$S1" DS_STEP_TIMELINE=1 DS_GRAPH_IO=1; grep "step timeline" $R/ob_tl_gio.log | cut -c1-400
ob def_4k "$V2 --batch-size 1 --input-len 4096"; ob gio_4k "$V2 --batch-size 1 --input-len 4096" DS_GRAPH_IO=1
ob def_b8 "$V2 --batch-size 8 --input-len 1024"; ob gio_b8 "$V2 --batch-size 8 --input-len 1024" DS_GRAPH_IO=1
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"
ob def_v3 "$V3"; ob gio_v3 "$V3" DS_GRAPH_IO=1
echo "one-batch done $(( $(date +%s) - T0 ))s"
PORT=30125
for mode in def gio; do
  if [ $mode = gio ]; then export DS_GRAPH_IO=1; else unset DS_GRAPH_IO; fi
  $B/dsinfer serve --model $B/data/deepseek-v2-lite --tokenizer byte --load-format dummy --num-layers 27 --device cuda \
    --host 127.0.0.1 --port $PORT --served-model-name v2-lite --max-running-requests 256 --max-num-batched-tokens 8192 > $R/server_$mode.log 2>&1 &
  pid=$!
  for i in $(seq 1 120); do python3 -c 'import urllib.request,sys; urllib.request.urlopen("http://127.0.0.1:%s/v1/models" % sys.argv[1], timeout=2)' $PORT 2>/dev/null && break; sleep 0.5; done
  timeout 90 $B/dsinfer bench serve --port $PORT --model v2-lite --dataset-name random --random-input-len 1024 --random-output-len 256 \
    --vocab-size 102400 --num-prompts 8 --max-concurrency 1 --warmup-requests 1 --ignore-eos --seed 8943 \
    --extra-body '{"return_token_ids": true}' --disable-tqdm --output-file $R/serve_c1_$mode.json > $R/serve_c1_$mode.txt 2>&1
  echo "serve $mode c=1 rc=$? $(grep -E 'Output token throughput|Median TPOT|Median TTFT' $R/serve_c1_$mode.txt | sed 's/  */ /g' | tr '\n' ' ') $(( $(date +%s) - T0 ))s"
  kill $pid; wait $pid 2>/dev/null
done
unset DS_GRAPH_IO
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call1.tgz .
