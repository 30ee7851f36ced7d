#!/usr/bin/env bash
# Packs .carry/ for scripts/gpu_session.sh: the CUDA build (via gpu_carry.sh) plus extra.tar.xz
# (the real DeepSeek-V3 tokenizer, the 20 MiB text corpus, the benchmark and fixture scripts).
# Then: run tool, carry [".carry"], command `bash .carry/scripts/gpu_session.sh`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/.carry}
bash "$ROOT/scripts/gpu_carry.sh" "$DEST"
CORPUS=$ROOT/build/tokenizer_corpus/corpus.jsonl
[ -s "$CORPUS" ] || bash "$ROOT/scripts/make_text_corpus.sh" "$CORPUS" >&2
STAGE=$(mktemp -d)
mkdir -p "$STAGE/tok" "$STAGE/bench" "$STAGE/scripts"
cp "$ROOT"/../shared/models/deepseek-v3/tokenizer.json "$ROOT"/../shared/models/deepseek-v3/tokenizer_config.json "$STAGE/tok/"
cp "$CORPUS" "$STAGE/corpus.jsonl"
cp "$ROOT/bench/tokenizer_bench.sh" "$STAGE/bench/"
cp "$ROOT/scripts/make_fixtures.py" "$ROOT/scripts/hf_python.sh" "$STAGE/scripts/"
tar -C "$STAGE" -cf - . | xz -T2 -6 >"$DEST/extra.tar.xz"
cp "$ROOT/scripts/gpu_session.sh" "$DEST/scripts/"
rm -rf "$STAGE"
du -sh "$DEST"
