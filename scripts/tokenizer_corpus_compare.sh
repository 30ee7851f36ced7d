#!/usr/bin/env bash
# Compares dsinfer's token ids with HF tokenizers on the >= 20 MiB real-text corpus
# (scripts/make_text_corpus.sh), document by document, add_special_tokens=False.
# usage: scripts/tokenizer_corpus_compare.sh [DSINFER_BIN] [TOKENIZER_DIR]
# Prints one JSON record; exit 0 if every document matches, 1 on a mismatch, 77 (skip) only
# when HF tokenizers cannot be installed because PyPI is unreachable.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/dsinfer}
TOK=${2:-../shared/models/deepseek-v3}
CORPUS=${DS_TOKENIZER_CORPUS:-build/tokenizer_corpus/corpus.jsonl}
[ -s "$CORPUS" ] || bash scripts/make_text_corpus.sh "$CORPUS" >&2
set +e
PY=$(bash scripts/hf_python.sh)
rc=$?
set -e
[ $rc -eq 0 ] || exit $rc
OURS=$(mktemp)
trap 'rm -f "$OURS"' EXIT
start=$(date +%s%N)
"$BIN" tokenize --tokenizer "$TOK" --input-jsonl "$CORPUS" --output json > "$OURS"
end=$(date +%s%N)
"$PY" - "$CORPUS" "$OURS" "$TOK" "$(( (end - start) / 1000000 ))" <<'PY'
import json, sys
from tokenizers import Tokenizer
import tokenizers
corpus, ours_path, tok_dir, ours_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) / 1000
tok = Tokenizer.from_file(tok_dir + "/tokenizer.json")
texts = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8")]
ours = [json.loads(l)["ids"] for l in open(ours_path, encoding="utf-8")]
hf = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
match = sum(1 for a, b in zip(ours, hf) if a == b)
ntok = sum(len(x) for x in hf)
nbytes = sum(len(t.encode("utf-8")) for t in texts)
rec = {"corpus": corpus, "documents": len(texts), "ours_documents": len(ours), "matching_documents": match,
       "text_bytes": nbytes, "hf_tokens": ntok, "tokenizers_version": tokenizers.__version__,
       "dsinfer_cli_seconds": round(ours_s, 2)}
print(json.dumps(rec))
if match != len(texts) or len(ours) != len(texts):
    for i, (a, b) in enumerate(zip(ours, hf)):
        if a != b:
            k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            print("first mismatch: document %d at token %d: ours %s hf %s; text near: %r" % (
                i, k, a[k:k + 8], b[k:k + 8], tok.decode(b[max(0, k - 8):k + 8], skip_special_tokens=False)))
            break
    sys.exit(1)
PY
