#!/usr/bin/env python3
"""A tiny OpenAI-compatible streaming server for testing `dsinfer bench serve` (stdlib only).

GET  /v1/models                 -> {"data": [{"id": MODEL}]}
POST /v1/completions            -> SSE stream: one chunk per token, then a usage chunk, [DONE]
POST /v1/chat/completions       -> same with chat deltas (a role preamble first)

Each stream waits --ttft-ms before the first token and --itl-ms between tokens, and emits
max_tokens tokens (min_tokens honoured; ignore_eos accepted). Responses use chunked
transfer encoding (or, with --close-delimited, an HTTP/1.0-style body ended by closing).
Failure injection: every --fail-every'th request (1-based) gets HTTP 500; a text prompt
containing "BREAK" gets a stream cut after one token. Prefix cache: usage reports
prompt_tokens_details.cached_tokens = 512 x the number of leading 512-token blocks of an
id prompt that an earlier request already sent. Every request body is appended as one JSON
line to --log FILE. The bound port is printed on stdout ("PORT <n>").
"""
import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()
COUNTER = [0]
SEEN_BLOCKS = set()


def cached_tokens(prompt):
    if not isinstance(prompt, list):
        return 0
    n = 0
    with LOCK:
        hits = True
        for b in range(len(prompt) // 512):
            key = tuple(prompt[: (b + 1) * 512])
            if hits and key in SEEN_BLOCKS:
                n += 512
            else:
                hits = False
            SEEN_BLOCKS.add(key)
    return n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": ARGS.model, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def _send(self, data: bytes):
        if ARGS.close_delimited:
            self.wfile.write(data)
        else:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, obj):
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        self._send(("data: " + payload + "\n\n").encode())

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        with LOCK:
            COUNTER[0] += 1
            idx = COUNTER[0]
            if ARGS.log:
                with open(ARGS.log, "a") as f:
                    f.write(json.dumps({"path": self.path, "body": req}) + "\n")
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"error": {"message": "no such endpoint"}})
        if ARGS.fail_every and idx % ARGS.fail_every == 0:
            return self._json(500, {"error": {"message": "injected failure %d" % idx}})
        if req.get("model") != ARGS.model:
            return self._json(404, {"error": {"message": "model %r not served" % req.get("model")}})
        prompt = req["messages"][-1]["content"] if chat else req.get("prompt")
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        cached = cached_tokens(prompt)
        max_tokens = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if ARGS.close_delimited:
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if chat:
            self._event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        time.sleep(ARGS.ttft_ms / 1000.0)
        for i in range(max_tokens):
            if i:
                time.sleep(ARGS.itl_ms / 1000.0)
            text = " t%d" % i
            if chat:
                ch = {"index": 0, "delta": {"content": text}, "finish_reason": None}
            else:
                ch = {"index": 0, "text": text, "finish_reason": None}
            self._event({"id": "cmpl-%d" % idx, "object": "text_completion", "choices": [ch]})
            if isinstance(prompt, str) and "BREAK" in prompt:
                self.close_connection = True
                return  # cut the stream: no terminating chunk
        fin = {"index": 0, "finish_reason": "length"}
        fin.update({"delta": {}} if chat else {"text": ""})
        self._event({"choices": [fin]})
        if (req.get("stream_options") or {}).get("include_usage"):
            self._event({"choices": [], "usage": {
                "prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                "total_tokens": prompt_tokens + max_tokens,
                "prompt_tokens_details": {"cached_tokens": cached}}})
        self._event("[DONE]")
        if not ARGS.close_delimited:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--model", default="mock-model")
    p.add_argument("--ttft-ms", type=float, default=20)
    p.add_argument("--itl-ms", type=float, default=5)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--close-delimited", action="store_true")
    p.add_argument("--log", default="")
    p.add_argument("--max-seconds", type=float, default=300, help="exit after this long")
    ARGS = p.parse_args()
    ThreadingHTTPServer.request_queue_size = 1024  # listen backlog: many simultaneous connects
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    threading.Timer(ARGS.max_seconds, srv.shutdown).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
