#!/usr/bin/env bash
# One GPU-machine call for the integration checks of a session (see scripts/gpu_pack_session.sh,
# which packs .carry/): CUDA op + fixture tests (gpu_check.sh stages), `dsinfer serve --device
# cuda` with DeepSeek-V3 real shapes (dummy FP8, truncated) and the real tokenizer answering
# chat requests, the tokenizer benchmark beside HF tokenizers on this machine's CPU, and the
# fixtures regenerated with this machine's transformers compared with the committed goldens.
# Logs go to $OUT. STAGES selects (default: check serve tokbench fixtures).
set -uo pipefail
FINAL=${OUT:-/tmp/gpu_session}
OUT=/tmp/gpu_session_logs          # everything here is packed into $FINAL/logs.tgz at the end
mkdir -p "$FINAL" "$OUT"
C=$(cd "$(dirname "$0")/.." && pwd)           # the .carry folder
W=/tmp/dsinfer_gpu
mkdir -p $W && xz -dc "$C/bin.tar.xz" | tar -C $W -xf - || exit 1
B=$W/bin
mkdir -p $W/extra && xz -dc "$C/extra.tar.xz" | tar -C $W/extra -xf - || exit 1
E=$W/extra
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
S="$OUT/summary.txt"; : >"$S"
note() { echo "$*" | tee -a "$S"; }
note "== gpu_session $(date -u +%FT%TZ) commit $(cat $B/COMMIT)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
STAGES=${STAGES:-"check serve tokbench fixtures"}
for st in $STAGES; do
  t0=$(date +%s)
  case $st in
    check)
      OUT="$OUT/check" STAGES="ops fixtures" OPS_FILTER="${OPS_FILTER:-CudaGemm.*:CudaMlaDecode.*}" \
        bash "$C/scripts/gpu_check.sh" "$B" >"$OUT/check_stdout.log" 2>&1
      note "check: rc=$?"
      grep -E "^ops:|^fixtures:|FAIL|cublas" "$OUT/check/summary.txt" | head -30 | tee -a "$S"
      ;;
    serve)
      PORT=8123
      "$B/dsinfer" serve --model "$B/data/deepseek-v3" --load-format dummy --num-layers "${SERVE_LAYERS:-4}" \
        --tokenizer "$E/tok" --served-model-name deepseek-v3-dummy --device cuda --port $PORT \
        --max-running-requests 64 >"$OUT/serve.log" 2>&1 &
      SP=$!
      up=0
      for _ in $(seq 1 600); do
        curl -sf localhost:$PORT/health >/dev/null 2>&1 && { up=1; break; }
        kill -0 $SP 2>/dev/null || break
        sleep 0.5
      done
      note "serve: up=$up after $(( $(date +%s) - t0 )) s"
      if [ $up = 1 ]; then
        curl -s localhost:$PORT/v1/chat/completions -H 'Content-Type: application/json' \
          -d '{"model":"deepseek-v3-dummy","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in French."}],"max_tokens":32,"temperature":0}' \
          >"$OUT/serve_chat.json"
        note "chat: $(head -c 700 "$OUT/serve_chat.json")"
        curl -sN localhost:$PORT/v1/chat/completions -H 'Content-Type: application/json' \
          -d '{"model":"deepseek-v3-dummy","messages":[{"role":"user","content":"Count to five."}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}' \
          >"$OUT/serve_stream.txt"
        note "stream: $(grep -c '^data:' "$OUT/serve_stream.txt") data lines; last: $(grep '^data:' "$OUT/serve_stream.txt" | tail -2 | head -1 | head -c 300)"
        # 64 concurrent chat requests of 2,048 prompt tokens (token ids) x 128 output tokens.
        python3 - $PORT >"$OUT/serve_load.txt" 2>&1 <<'PY'
import json, sys, time, random, concurrent.futures, urllib.request
port = int(sys.argv[1])
def one(i):
    rnd = random.Random(i)
    body = {"model": "deepseek-v3-dummy", "prompt": [rnd.randrange(1000, 120000) for _ in range(2048)],
            "max_tokens": 128, "ignore_eos": True, "temperature": 0}
    t0 = time.time()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    r = json.loads(urllib.request.urlopen(req, timeout=600).read())
    return time.time() - t0, r["usage"]["completion_tokens"]
t0 = time.time()
with concurrent.futures.ThreadPoolExecutor(64) as ex:
    res = list(ex.map(one, range(64)))
dt = time.time() - t0
toks = sum(r[1] for r in res)
print(json.dumps({"requests": len(res), "prompt_tokens_each": 2048, "completion_tokens": toks,
                  "wall_s": round(dt, 2), "output_tok_s": round(toks / dt, 1),
                  "e2e_s_median": round(sorted(r[0] for r in res)[len(res) // 2], 2)}))
PY
        note "load(64 x 2048 in, 128 out): $(tail -1 "$OUT/serve_load.txt")"
        curl -s localhost:$PORT/metrics | grep -E "^dsinfer:(num_requests|kv_cache_usage|generation_tokens_total|prompt_tokens_total)" | tee -a "$S"
      fi
      kill -TERM $SP 2>/dev/null; wait $SP 2>/dev/null
      note "serve: stopped rc=$? ($(( $(date +%s) - t0 )) s); decode graphs captured: $(grep -c 'captured decode graph' "$OUT/serve.log"); log tail:"
      tail -5 "$OUT/serve.log" | tee -a "$S"
      ;;
    serve_eager)
      # The same greedy chat request with CUDA graphs off: the answer must be identical.
      PORT=8124
      "$B/dsinfer" serve --model "$B/data/deepseek-v3" --load-format dummy --num-layers "${SERVE_LAYERS:-4}" \
        --tokenizer "$E/tok" --served-model-name deepseek-v3-dummy --device cuda --port $PORT \
        --disable-cuda-graph >"$OUT/serve_eager.log" 2>&1 &
      SP=$!
      for _ in $(seq 1 600); do curl -sf localhost:$PORT/health >/dev/null 2>&1 && break; kill -0 $SP 2>/dev/null || break; sleep 0.5; done
      curl -s localhost:$PORT/v1/chat/completions -H 'Content-Type: application/json' \
        -d '{"model":"deepseek-v3-dummy","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in French."}],"max_tokens":32,"temperature":0}' \
        >"$OUT/serve_chat_eager.json"
      kill -TERM $SP 2>/dev/null; wait $SP 2>/dev/null
      python3 - "$OUT/serve_chat.json" "$OUT/serve_chat_eager.json" <<'PY' 2>&1 | tee -a "$S"
import json, sys
a, b = (json.load(open(f))["choices"][0]["message"]["content"] for f in sys.argv[1:3])
print(f"serve graphs-on vs --disable-cuda-graph greedy chat: identical={a == b}")
PY
      ;;
    tokbench)
      bash "$E/bench/tokenizer_bench.sh" --dsinfer "$B/dsinfer" --tokenizer "$E/tok" --corpus "$E/corpus.jsonl" \
        --python python3 --repeat 3 >"$OUT/tokenizer_bench.json" 2>"$OUT/tokenizer_bench.err"
      note "tokbench: rc=$? $(cat "$OUT/tokenizer_bench.json")"
      ;;
    fixtures)
      python3 "$E/scripts/make_fixtures.py" --out $W/fx >"$OUT/fixtures_regen.log" 2>&1
      note "fixtures regen: rc=$?"
      python3 - $W/fx "$B/data" <<'PY' 2>&1 | tee -a "$S"
import json, os, sys, transformers, torch
new, old = sys.argv[1], sys.argv[2]
print(f"transformers {transformers.__version__} torch {torch.__version__}")
for name in sorted(os.listdir(new)):
    g1 = os.path.join(new, name, "golden.json"); g0 = os.path.join(old, name, "golden.json")
    if not (os.path.exists(g1) and os.path.exists(g0)): continue
    a, b = json.load(open(g1)), json.load(open(g0))
    la, lb = a.get("prompt_logits"), b.get("prompt_logits")
    diff = max(abs(x - y) for ra, rb in zip(la, lb) for x, y in zip(ra, rb)) if la and lb else float("nan")
    mx = max(abs(y) for rb in lb for y in rb) if lb else float("nan")
    ga, gb = a.get("greedy_ids"), b.get("greedy_ids")
    print(f"{name}: max|dlogit|={diff:.3e} (max|logit| {mx:.3f}) greedy_equal={ga == gb}")
PY
      ;;
  esac
  note "stage $st: $(( $(date +%s) - t0 )) s"
done
cp "$S" "$FINAL/summary.txt"
tar -C /tmp -czf "$FINAL/logs.tgz" gpu_session_logs
