#!/usr/bin/env bash
# End-to-end performance sweep (issue 7), for the GPU machine:
#   for each model spec: start `dsinfer serve` (dummy weights), sweep concurrency x input
#   length with `dsinfer bench serve` (random prompts, fixed output, ignore_eos), stop the
#   server; then `dsinfer bench one-batch` (measured step time) and `dsinfer bench roofline`
#   at batch = concurrency; the transformers baseline; optionally a trace replay; finally
#   bench/results/e2e.json (bench/e2e_records.py), the SVG plots (bench/plot_e2e.py) and
#   bench/results/summary.md with the acceptance figures (bench/analyze_e2e.py).
#
# Everything is set by environment variables (defaults in brackets):
#   DSINFER [build/dsinfer]   DEVICE [cuda]   PORT [8100]   OUT_DIR [bench/results]
#   MODEL_SPECS ["v2-lite:../shared/models/deepseek-v2-lite:27:bf16 v3:../shared/models/deepseek-v3:8:fp8"]
#       name:config_dir:layers:dtype[:lens] (dtype is a label; the config decides BF16 vs FP8;
#       lens, e.g. 1024,4096, replaces INPUT_LENS for that model)
#   CONCURRENCY ["1 8 32 64 128 256"]   INPUT_LENS ["1024 4096"]   OUTPUT_LEN [256]
#   PROMPTS_PER_CONC [3]  MIN_PROMPTS [8]: requests per point = max(MIN, C x PER_CONC)
#       (each point draws its prompts with its own seed, so no point's prompts are prefix-cache
#       hits from an earlier point; warm-up prompts are separate random prompts too)
#   NUM_GPUS [1]   SERVE_ARGS ["--max-running-requests 256"]: extra `dsinfer serve` flags
#   LOAD_FORMAT [dummy]: the servers' --load-format (fake: the test runner, for dry runs on a CPU)
#   SERVER_CMD [""]: replaces the server command; {port} {model_dir} {layers} are substituted.
#       The default command serves the model dir's tokenizer.json, or `--tokenizer byte` when
#       the dir has none (V2-Lite's); prompts are token ids either way.
#   EXTRA_BODY ['{"return_token_ids": true}']: merged into every request (dsinfer/vLLM
#       extension: every chunk carries its token ids, so tokens with no text are timed too)
#   SERVER_WAIT_S [900]   BENCH_TIMEOUT_S [1800]
#   STAGES ["serve onebatch roofline hf trace records plot analyze"]
#   ONE_BATCH_CONC [$CONCURRENCY]  ONE_BATCH_OUTPUT_LEN [16]
#   MEM_BW_GBPS, FLOPS_TFLOPS: roofline rates. Unset on cuda: measured by bench/gpu_rates.py
#       (torch) before the servers start; FP8 models then use the FP8 GEMM rate, others BF16.
#       Unset on cpu: measured by dsinfer itself.
#   HF_BATCH ["1 8"]  HF_INPUT_LENS [$INPUT_LENS]  HF_OUTPUT_LEN [$OUTPUT_LEN]  PYTHON [python3]
#   TRACE_MODEL [first spec]  TRACE_FILE [../shared/traces/mooncake_conversation_trace.jsonl]
#   TRACE_DURATION_S [600]  TRACE_TIME_SCALE [1]  TRACE_TIMEOUT_S [BENCH_TIMEOUT_S]
#   DEADLINE [""]: epoch seconds; serve points, one-batch and baseline runs not started by then
#       are skipped (logged), so a time-limited GPU call still assembles what it measured
#   COMMIT [git rev-parse --short HEAD]   ONE_BATCH_ARGS [""]: extra one-batch flags (e.g. --profile)
# Raw outputs go to $OUT_DIR/raw/, logs to $OUT_DIR/logs/.
set -uo pipefail
cd "$(dirname "$0")/.."

DSINFER=${DSINFER:-build/dsinfer}
DEVICE=${DEVICE:-cuda}
PORT=${PORT:-8100}
OUT_DIR=${OUT_DIR:-bench/results}
MODEL_SPECS=${MODEL_SPECS:-"v2-lite:../shared/models/deepseek-v2-lite:27:bf16 v3:../shared/models/deepseek-v3:8:fp8"}
CONCURRENCY=${CONCURRENCY:-"1 8 32 64 128 256"}
INPUT_LENS=${INPUT_LENS:-"1024 4096"}
OUTPUT_LEN=${OUTPUT_LEN:-256}
PROMPTS_PER_CONC=${PROMPTS_PER_CONC:-3}
MIN_PROMPTS=${MIN_PROMPTS:-8}
NUM_GPUS=${NUM_GPUS:-1}
SERVE_ARGS=${SERVE_ARGS:---max-running-requests 256}
SERVER_CMD=${SERVER_CMD:-}
SERVER_WAIT_S=${SERVER_WAIT_S:-900}
EXTRA_BODY=${EXTRA_BODY:-'{"return_token_ids": true}'}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-1800}
STAGES=${STAGES:-"serve onebatch roofline hf trace records plot analyze"}
ONE_BATCH_CONC=${ONE_BATCH_CONC:-$CONCURRENCY}
ONE_BATCH_OUTPUT_LEN=${ONE_BATCH_OUTPUT_LEN:-16}
MEM_BW_GBPS=${MEM_BW_GBPS:-}
FLOPS_TFLOPS=${FLOPS_TFLOPS:-}
HF_BATCH=${HF_BATCH:-"1 8"}
HF_INPUT_LENS=${HF_INPUT_LENS:-$INPUT_LENS}
HF_OUTPUT_LEN=${HF_OUTPUT_LEN:-$OUTPUT_LEN}
PYTHON=${PYTHON:-python3}
TRACE_FILE=${TRACE_FILE:-../shared/traces/mooncake_conversation_trace.jsonl}
TRACE_DURATION_S=${TRACE_DURATION_S:-600}
TRACE_TIME_SCALE=${TRACE_TIME_SCALE:-1}
TRACE_MODEL=${TRACE_MODEL:-}

RAW=$OUT_DIR/raw
LOGS=$OUT_DIR/logs
mkdir -p "$RAW" "$LOGS"
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
log() { echo "[sweep $(date -u +%H:%M:%S)] $*" >&2; }

GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ -z "$GPU_NAME" ] && GPU_NAME="cpu ($(uname -m))"
export COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
DEADLINE=${DEADLINE:-}
ONE_BATCH_ARGS=${ONE_BATCH_ARGS:-}
past_deadline() { [ -n "$DEADLINE" ] && [ "$(date +%s)" -ge "$DEADLINE" ]; }
FAILURES=0
BF16_TFLOPS=""; FP8_TFLOPS=""
if [ "$DEVICE" = cuda ] && { [ -z "$MEM_BW_GBPS" ] || [ -z "$FLOPS_TFLOPS" ]; }; then
  log "measuring GPU rates (bench/gpu_rates.py)"
  if "$PYTHON" bench/gpu_rates.py --output-file "$OUT_DIR/gpu_rates.json" > "$LOGS/gpu_rates.txt" 2>&1; then
    read -r bw bf fp < <("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["mem_bw_gbps"], r["bf16_tflops"], r["fp8_tflops"] or r["bf16_tflops"])' "$OUT_DIR/gpu_rates.json")
    [ -z "$MEM_BW_GBPS" ] && MEM_BW_GBPS=$bw
    BF16_TFLOPS=$bf; FP8_TFLOPS=$fp
    log "rates: ${MEM_BW_GBPS} GB/s, bf16 ${BF16_TFLOPS} TFLOP/s, fp8 ${FP8_TFLOPS} TFLOP/s"
  else
    log "gpu_rates.py failed (see $LOGS/gpu_rates.txt): pass MEM_BW_GBPS and FLOPS_TFLOPS"; FAILURES=$((FAILURES + 1))
  fi
fi
rate_flags_for() {  # dtype label -> RATE_FLAGS
  RATE_FLAGS=()
  local fl=$FLOPS_TFLOPS
  if [ -z "$fl" ]; then
    if [ "$1" = fp8 ]; then fl=$FP8_TFLOPS; else fl=$BF16_TFLOPS; fi
  fi
  [ -n "$MEM_BW_GBPS" ] && RATE_FLAGS+=(--mem-bw-gbps "$MEM_BW_GBPS")
  [ -n "$fl" ] && RATE_FLAGS+=(--flops-tflops "$fl")
  return 0
}

vocab_of() { "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]+"/config.json"))["vocab_size"])' "$1" 2>/dev/null || echo 32000; }

SERVER_PID=""
start_server() {  # name dir layers
  local name=$1 dir=$2 layers=$3 cmd
  if [ -n "$SERVER_CMD" ]; then
    cmd=${SERVER_CMD//\{port\}/$PORT}
    cmd=${cmd//\{model_dir\}/$dir}
    cmd=${cmd//\{layers\}/$layers}
  else
    local tok=""
    [ -f "$dir/tokenizer.json" ] || tok="--tokenizer byte"
    cmd="$DSINFER serve --model $dir $tok --load-format ${LOAD_FORMAT:-dummy} --num-layers $layers --device $DEVICE --host 127.0.0.1 --port $PORT --served-model-name $name $SERVE_ARGS"
  fi
  log "starting server: $cmd"
  bash -c "exec $cmd" > "$LOGS/server_$name.log" 2>&1 &
  SERVER_PID=$!
  local waited=0
  while [ "$waited" -lt "$SERVER_WAIT_S" ]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      log "server exited early; see $LOGS/server_$name.log"; tail -20 "$LOGS/server_$name.log" >&2; SERVER_PID=""; return 1
    fi
    if "$PYTHON" -c 'import sys,urllib.request; urllib.request.urlopen("http://127.0.0.1:%s/v1/models" % sys.argv[1], timeout=2)' "$PORT" 2>/dev/null; then
      log "server up after ${waited}s"; return 0
    fi
    sleep 2; waited=$((waited + 2))
  done
  log "server not up after ${SERVER_WAIT_S}s"; stop_server; return 1
}
stop_server() {
  [ -z "$SERVER_PID" ] && return 0
  kill -TERM "$SERVER_PID" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
  kill -KILL "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}
trap stop_server EXIT

run_serve_sweep() {  # name dir layers dtype
  local name=$1 dir=$2 layers=$3 dtype=$4 vocab
  vocab=$(vocab_of "$dir")
  for L in $MODEL_LENS; do
    for C in $CONCURRENCY; do
      if past_deadline; then log "deadline: skipping $name in=$L c=$C"; continue; fi
      local n=$((C * PROMPTS_PER_CONC)); [ "$n" -lt "$MIN_PROMPTS" ] && n=$MIN_PROMPTS
      local warm=$C; [ "$warm" -gt 8 ] && warm=8
      local meta
      meta=$(printf '{"model_name":"%s","layers":%d,"dtype":"%s","concurrency":%d,"input_len":%d,"output_len":%d,"gpu":"%s","commit":"%s"}' \
             "$name" "$layers" "$dtype" "$C" "$L" "$OUTPUT_LEN" "$GPU_NAME" "$COMMIT")
      log "$name in=$L c=$C: $n requests"
      timeout "$BENCH_TIMEOUT_S" "$DSINFER" bench serve --port "$PORT" --model "$name" \
        --dataset-name random --random-input-len "$L" --random-output-len "$OUTPUT_LEN" --vocab-size "$vocab" \
        --num-prompts "$n" --max-concurrency "$C" --warmup-requests "$warm" --ignore-eos --seed "$((C * 7919 + L))" \
        --num-gpus "$NUM_GPUS" --disable-tqdm --metadata "$meta" --extra-body "$EXTRA_BODY" \
        --output-file "$RAW/serve_${name}_in${L}_c${C}.json" > "$LOGS/serve_${name}_in${L}_c${C}.txt" 2>&1 \
        || { log "bench serve failed ($name in=$L c=$C), see $LOGS/serve_${name}_in${L}_c${C}.txt"; FAILURES=$((FAILURES + 1)); }
    done
  done
}

run_trace() {  # name dir layers
  local name=$1 dir=$2
  log "trace replay: $TRACE_FILE, first ${TRACE_DURATION_S}s, time scale $TRACE_TIME_SCALE"
  # At the time limit the client gets SIGINT: it stops sending, cancels what is in flight and
  # still writes its JSON ("interrupted": true) over the requests that ended. Progress lines
  # every 10 s go to the log (no --disable-tqdm), so a replay that falls behind shows where.
  timeout -s INT -k 30 "${TRACE_TIMEOUT_S:-$BENCH_TIMEOUT_S}" "$DSINFER" bench serve --port "$PORT" --model "$name" \
    --dataset-name trace --dataset-path "$TRACE_FILE" --trace-duration-s "$TRACE_DURATION_S" \
    --trace-time-scale "$TRACE_TIME_SCALE" --vocab-size "$(vocab_of "$dir")" --ignore-eos --num-gpus "$NUM_GPUS" \
    --extra-body "$EXTRA_BODY" \
    --metadata "$(printf '{"model_name":"%s","gpu":"%s","commit":"%s"}' "$name" "$GPU_NAME" "$COMMIT")" \
    --output-file "$OUT_DIR/trace_${name}.json" > "$OUT_DIR/trace_${name}.txt" 2>&1
  local rc=$?
  if [ $rc -eq 124 ] && [ -f "$OUT_DIR/trace_${name}.json" ]; then
    log "trace replay stopped at its time limit (${TRACE_TIMEOUT_S:-$BENCH_TIMEOUT_S} s): partial results in $OUT_DIR/trace_${name}.json"
    FAILURES=$((FAILURES + 1))
  elif [ $rc -ne 0 ]; then
    log "trace replay failed (rc $rc), see $OUT_DIR/trace_${name}.txt"; FAILURES=$((FAILURES + 1))
  fi
}

first_name=""
for spec in $MODEL_SPECS; do
  IFS=: read -r name dir layers dtype lens <<< "$spec"
  MODEL_LENS=${lens:+${lens//,/ }}
  MODEL_LENS=${MODEL_LENS:-$INPUT_LENS}
  [ -z "$first_name" ] && first_name=$name
  [ -d "$dir" ] || { log "no model dir $dir for $name"; FAILURES=$((FAILURES + 1)); continue; }
  rate_flags_for "$dtype"
  if has_stage serve || { has_stage trace && [ "${TRACE_MODEL:-$first_name}" = "$name" ]; }; then
    if start_server "$name" "$dir" "$layers"; then
      has_stage serve && run_serve_sweep "$name" "$dir" "$layers" "$dtype"
      has_stage trace && [ "${TRACE_MODEL:-$first_name}" = "$name" ] && run_trace "$name" "$dir" "$layers"
      stop_server
    else
      FAILURES=$((FAILURES + 1))
    fi
  fi
  for L in $MODEL_LENS; do
    if has_stage onebatch; then
      for B in $ONE_BATCH_CONC; do
        if past_deadline; then log "deadline: skipping one-batch $name b=$B in=$L"; continue; fi
        log "one-batch $name b=$B in=$L"
        timeout "$BENCH_TIMEOUT_S" "$DSINFER" bench one-batch --model "$dir" --load-format dummy --num-layers "$layers" \
          --batch-size "$B" --input-len "$L" --output-len "$ONE_BATCH_OUTPUT_LEN" --device "$DEVICE" "${RATE_FLAGS[@]}" $ONE_BATCH_ARGS \
          --output-file "$RAW/onebatch_${name}_in${L}_b${B}.json" > "$LOGS/onebatch_${name}_in${L}_b${B}.txt" 2>&1 \
          || { log "one-batch failed ($name b=$B in=$L), see $LOGS/onebatch_${name}_in${L}_b${B}.txt"; FAILURES=$((FAILURES + 1)); }
      done
    fi
    if has_stage roofline; then
      for C in $CONCURRENCY; do
        "$DSINFER" bench roofline --model "$dir" --num-layers "$layers" --batch-size "$C" --input-len "$L" \
          --output-len "$OUTPUT_LEN" --device "$DEVICE" "${RATE_FLAGS[@]}" \
          --output-file "$RAW/roofline_${name}_in${L}_b${C}.json" > "$LOGS/roofline_${name}_in${L}_b${C}.txt" 2>&1 \
          || { log "roofline failed ($name b=$C in=$L), see $LOGS/roofline_${name}_in${L}_b${C}.txt"; FAILURES=$((FAILURES + 1)); }
      done
    fi
  done
  if has_stage hf; then
    if "$PYTHON" -c 'import torch, transformers' 2>/dev/null; then
      for L in $HF_INPUT_LENS; do
        for B in $HF_BATCH; do
          if past_deadline; then log "deadline: skipping transformers baseline $name b=$B in=$L"; continue; fi
          log "transformers baseline $name b=$B in=$L"
          timeout "$BENCH_TIMEOUT_S" "$PYTHON" bench/hf_baseline.py --model "$dir" --num-layers "$layers" \
            --batch-size "$B" --input-len "$L" --output-len "$HF_OUTPUT_LEN" --device "$DEVICE" \
            --output-file "$OUT_DIR/hf_baseline_${name}_in${L}_b${B}.json" > "$LOGS/hf_${name}_in${L}_b${B}.txt" 2>&1 \
            || { log "hf baseline failed ($name b=$B in=$L), see $LOGS/hf_${name}_in${L}_b${B}.txt"; FAILURES=$((FAILURES + 1)); }
        done
      done
    else
      log "skipping the transformers baseline: $PYTHON has no torch/transformers"
    fi
  fi
done

if has_stage records; then
  "$PYTHON" bench/e2e_records.py --raw "$RAW" --out "$OUT_DIR/e2e.json" --gpu "$GPU_NAME" --commit "$COMMIT" \
    || FAILURES=$((FAILURES + 1))
fi
if has_stage plot && [ -f "$OUT_DIR/e2e.json" ]; then
  "$PYTHON" bench/plot_e2e.py "$OUT_DIR/e2e.json" --out-dir "$OUT_DIR" --baseline $(ls "$OUT_DIR"/hf_baseline_*.json 2>/dev/null) \
    || FAILURES=$((FAILURES + 1))
fi
if has_stage analyze && [ -f "$OUT_DIR/e2e.json" ]; then
  "$PYTHON" bench/analyze_e2e.py "$OUT_DIR/e2e.json" --raw "$RAW" --out "$OUT_DIR/summary.md" > /dev/null \
    || FAILURES=$((FAILURES + 1))
fi
log "done: $FAILURES failure(s)"
[ "$FAILURES" -eq 0 ]
