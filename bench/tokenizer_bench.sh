#!/usr/bin/env bash
# Single-thread tokenizer encode throughput: dsinfer vs HF tokenizers, same documents, same
# machine, same run. Prints one JSON record.
#
# usage: bench/tokenizer_bench.sh [--dsinfer BIN] [--tokenizer DIR] [--corpus FILE.jsonl]
#                                 [--python PY] [--repeat N]
#   --dsinfer   a prebuilt dsinfer binary (default build/dsinfer)
#   --tokenizer model dir with tokenizer.json (default ../shared/models/deepseek-v3)
#   --corpus    .jsonl of {"text"} documents (default: build it with scripts/make_text_corpus.sh)
#   --python    python3 that can `import tokenizers` (default: scripts/hf_python.sh finds or
#               installs one)
#   --repeat    passes per implementation; the best pass counts (default 3)
# Both encode every document with add_special_tokens=False on one thread
# (HF: RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false, Tokenizer.encode per document);
# only the encode calls are timed. MB/s = UTF-8 bytes of the documents / 1e6 / seconds.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$HERE/build/dsinfer
TOK=$HERE/../shared/models/deepseek-v3
CORPUS=""
PY=""
REPEAT=3
while [ $# -gt 0 ]; do
  case "$1" in
    --dsinfer) BIN=$2; shift 2 ;;
    --tokenizer) TOK=$2; shift 2 ;;
    --corpus) CORPUS=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$CORPUS" ]; then
  CORPUS=$HERE/build/tokenizer_corpus/corpus.jsonl
  [ -s "$CORPUS" ] || bash "$HERE/scripts/make_text_corpus.sh" "$CORPUS" >&2
fi
[ -n "$PY" ] || PY=$(bash "$HERE/scripts/hf_python.sh")
OURS=$(OMP_NUM_THREADS=1 "$BIN" bench tokenizer --tokenizer "$TOK" --corpus "$CORPUS" --repeat "$REPEAT")
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
"$PY" - "$CORPUS" "$TOK" "$REPEAT" "$OURS" <<'PY'
import hashlib, json, platform, sys, time
import tokenizers
from tokenizers import Tokenizer
corpus, tok_dir, repeat, ours = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
tok = Tokenizer.from_file(tok_dir + "/tokenizer.json")
raw = open(corpus, "rb").read()
docs = [json.loads(l)["text"] for l in raw.decode("utf-8").splitlines() if l]
nbytes = sum(len(d.encode("utf-8")) for d in docs)
best, ntok = 1e30, 0
for _ in range(repeat):
    t0 = time.perf_counter()
    n = 0
    for d in docs:
        n += len(tok.encode(d, add_special_tokens=False).ids)
    best = min(best, time.perf_counter() - t0)
    ntok = n
cpu = "unknown"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
rec = {
    "benchmark": "tokenizer_encode_single_thread",
    "cpu": cpu, "host": platform.node(),
    "corpus": corpus, "corpus_sha256": hashlib.sha256(raw).hexdigest(),
    "documents": len(docs), "bytes": nbytes,
    "dsinfer_mb_per_s": round(ours["mb_per_s"], 2), "dsinfer_seconds": round(ours["seconds"], 3),
    "dsinfer_tokens": ours["tokens"],
    "hf_mb_per_s": round(nbytes / 1e6 / best, 2), "hf_seconds": round(best, 3), "hf_tokens": ntok,
    "hf_tokenizers_version": tokenizers.__version__,
    "speedup": round(ours["mb_per_s"] / (nbytes / 1e6 / best), 2),
    "same_token_count": ours["tokens"] == ntok, "repeat": repeat,
}
print(json.dumps(rec))
PY
