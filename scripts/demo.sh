#!/usr/bin/env bash
# The main job on the embedded default: sets up a fresh machine, builds dsinfer (CPU), starts
# `dsinfer serve` (OpenAI-compatible) on a tiny DeepSeek-V3-architecture model with seeded
# random weights, sends one streamed chat request with curl, then keeps serving until Ctrl-C.
#   bash scripts/demo.sh            # serve on 127.0.0.1:${PORT:-8000} after the sample request
#   bash scripts/demo.sh --once     # exit after the sample request (used by tests)
# The tokenizer is the real DeepSeek-V3 one when ../shared/models/deepseek-v3 is present,
# else the built-in byte-level tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE=0
[ "${1:-}" = "--once" ] && ONCE=1
PORT=${PORT:-8000}
bash scripts/setup.sh
TARGET=dsinfer bash scripts/build.sh
TOK=byte
[ -f ../shared/models/deepseek-v3/tokenizer.json ] && TOK=../shared/models/deepseek-v3
./build/dsinfer serve --tokenizer "$TOK" --served-model-name dsinfer-tiny --host 127.0.0.1 \
  --port "$PORT" --device cpu &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  kill -0 $SERVER 2>/dev/null || { echo "demo: the server exited" >&2; exit 1; }
  sleep 0.2
done
echo "demo: server up on http://127.0.0.1:$PORT (model dsinfer-tiny, random weights: the text is noise)"
echo "demo: POST /v1/chat/completions (streamed):"
curl -sN "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "dsinfer-tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}],
       "max_tokens": 24, "stream": true, "stream_options": {"include_usage": true}}'
echo
if [ "$ONCE" = 1 ]; then exit 0; fi
echo "demo: serving; try: curl -s http://127.0.0.1:$PORT/v1/models ; Ctrl-C to stop"
wait $SERVER
