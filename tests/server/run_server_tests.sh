#!/usr/bin/env bash
# Acceptance tests of `dsinfer serve` over real HTTP (openai client + raw HTTP + curl).
# Usage: tests/server/run_server_tests.sh [path/to/dsinfer]
# Makes a venv with the `openai` package next to the binary (reused across runs).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:-$ROOT/build/dsinfer}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
VENV=${DS_SERVE_VENV:-$(dirname "$BIN")/serve_test_venv}
if ! "$VENV/bin/python" -c "import openai" >/dev/null 2>&1; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check openai
fi
# 2,000 concurrent connections need more than the usual 1,024 descriptors (client side).
for n in "$(ulimit -Hn)" 1048576 65536 16384 8192; do ulimit -n "$n" 2>/dev/null && break; done
echo "server tests: open-file limit $(ulimit -n)"
export DS_SERVE_LOG_DIR=${DS_SERVE_LOG_DIR:-$(dirname "$BIN")}

SHARED=${DS_SHARED_DIR:-$ROOT/../shared}
FIXTURE=$ROOT/tests/data/serve_fake
TOKENIZER=byte
if [ -f "$SHARED/models/deepseek-v3/tokenizer.json" ] && [ -d "$ROOT/tests/data/serve_fake_v3" ] &&
   "$BIN" serve --help 2>/dev/null | grep -q -- --tokenizer &&
   [ -f "$ROOT/src/server/tokenizer.h" ]; then
  FIXTURE=$ROOT/tests/data/serve_fake_v3
  TOKENIZER=$SHARED/models/deepseek-v3
fi
echo "server tests: fixture $FIXTURE, tokenizer $TOKENIZER"

# curl smoke test: one request through a plain HTTP client.
"$BIN" serve --model "$FIXTURE" --tokenizer "$TOKENIZER" --load-format fake --port 0 \
  --served-model-name curl-test > "$DS_SERVE_LOG_DIR/curl_serve.out" 2> "$DS_SERVE_LOG_DIR/curl_serve.log" &
PID=$!
for _ in $(seq 600); do grep -q "listening on" "$DS_SERVE_LOG_DIR/curl_serve.out" && break; sleep 0.1; done
PORT=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$DS_SERVE_LOG_DIR/curl_serve.out")
OUT=$(curl -sS --fail-with-body "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"curl-test","messages":[{"role":"user","content":"curl says hi"}],"max_tokens":32}')
STREAM=$(curl -sSN --fail-with-body "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"curl-test","prompt":"<｜User｜>sse<｜Assistant｜>","max_tokens":8,"stream":true}')
CODE=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d '{"prompt":"x","max_tokens":0}')
kill -TERM $PID; wait $PID
CURL_OK=1
echo "$OUT" | grep -q '"content":"curl says hi"' || { echo "curl chat: unexpected $OUT"; CURL_OK=0; }
echo "$STREAM" | grep -q 'data: \[DONE\]' || { echo "curl stream: unexpected $STREAM"; CURL_OK=0; }
[ "$CODE" = 400 ] || { echo "curl max_tokens 0: status $CODE"; CURL_OK=0; }
[ $CURL_OK = 1 ] && echo "PASS curl_smoke" || { echo "FAIL curl_smoke"; exit 1; }

exec "$VENV/bin/python" "$ROOT/tests/server/test_openai_server.py" --dsinfer "$BIN" \
  --fixture "$FIXTURE" --tokenizer "$TOKENIZER" --byte-fixture "$ROOT/tests/data/serve_fake" --root "$ROOT"
