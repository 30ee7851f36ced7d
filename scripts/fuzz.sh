#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan, library instrumented) into build-fuzz/ and
# runs one for a bounded time on ONE core.
#   scripts/fuzz.sh [SECONDS=60] [TARGET=fuzz_safetensors]
#   TARGET: fuzz_safetensors (header parser) | fuzz_safetensors_index (index json)
#           | fuzz_tokenizer (encode/decode/stream) | fuzz_jinja (chat-template interpreter)
# Seeds: tests/fuzz/corpus/<safetensors|index>/ (small, committed). New inputs go to the
# working corpus build-fuzz/corpus-<TARGET>/ (not committed); crashes to build-fuzz/crashes-<TARGET>/.
# The log is build-fuzz/<TARGET>.log; the last line of libFuzzer's output gives the run count.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
TARGET=${2:-fuzz_safetensors}
BUILD_DIR=${BUILD_DIR:-build-fuzz}

# clang + the compiler-rt runtimes (libFuzzer, ASan, UBSan) and libomp for clang's OpenMP.
if ! command -v clang++ >/dev/null 2>&1; then NEED_CLANG=1; else NEED_CLANG=0; fi
CLANG_VER=$( (clang++ --version 2>/dev/null || true) | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
CLANG_VER=${CLANG_VER:-14}
PKGS=()
[ "$NEED_CLANG" = 1 ] && PKGS+=(clang)
for p in "libclang-rt-${CLANG_VER}-dev" "libomp-${CLANG_VER}-dev"; do
  dpkg -s "$p" >/dev/null 2>&1 || PKGS+=("$p")
done
if [ ${#PKGS[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}"
fi

CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDS_FUZZ=ON -DDS_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" --target "$TARGET" -j "${JOBS:-2}"

DICT=tests/fuzz/safetensors.dict
case "$TARGET" in
  fuzz_safetensors) SEEDS=tests/fuzz/corpus/safetensors ;;
  fuzz_safetensors_index) SEEDS=tests/fuzz/corpus/index ;;
  fuzz_tokenizer) SEEDS=tests/fuzz/corpus/tokenizer; DICT=tests/fuzz/tokenizer.dict ;;
  fuzz_jinja) SEEDS=tests/fuzz/corpus/jinja; DICT=tests/fuzz/jinja.dict ;;
  *) SEEDS=tests/fuzz/corpus/safetensors ;;
esac
export DS_TOKENIZER_DIR=${DS_TOKENIZER_DIR:-$(pwd)/../shared/models/deepseek-v3}
ROOT=$(pwd)
B=$(cd "$BUILD_DIR" && pwd)
CORPUS="$B/corpus-$TARGET"
CRASHES="$B/crashes-$TARGET"
mkdir -p "$CORPUS" "$CRASHES"
LOG="$B/$TARGET.log"
echo "fuzz: $TARGET for ${SECONDS_TO_RUN}s on one core; log $LOG; $(date -u +%FT%TZ); commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
# -jobs=1 -workers=1: one fuzzing process on one core; libFuzzer writes that job's output to
# fuzz-0.log in the current directory, so run inside the build dir.
rm -f "$B/fuzz-0.log"
set +e
(cd "$B" && "$B/$TARGET" "$CORPUS" "$ROOT/$SEEDS" -dict="$ROOT/$DICT" \
  -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
  -jobs=1 -workers=1 -print_final_stats=1 -artifact_prefix="$CRASHES/") >"$LOG" 2>&1
rc=$?
set -e
[ -f "$B/fuzz-0.log" ] && cat "$B/fuzz-0.log" >>"$LOG"
grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$LOG" | tail -1 || true
grep -E "^stat::" "$LOG" || true
ncrash=$(find "$CRASHES" -type f | wc -l)
if [ $rc -ne 0 ] || [ "$ncrash" -ne 0 ] || grep -qE "ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error:|deadly signal" "$LOG"; then
  echo "fuzz: $TARGET FAILED (rc=$rc, $ncrash artifacts in $CRASHES); see $LOG"
  exit 1
fi
echo "fuzz: $TARGET ok: no crash in ${SECONDS_TO_RUN}s (crashes=0)"
