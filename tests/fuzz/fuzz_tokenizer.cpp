// libFuzzer target for the tokenizer: any bytes must encode without crashing, decode back to
// their U+FFFD-repaired form, and stream (one id at a time) to the same text.
// Build: CC=clang CXX=clang++ cmake -B build-fuzz -DDS_FUZZ=ON -DDS_TESTS=OFF
// Run:   DS_TOKENIZER_DIR=../shared/models/deepseek-v3 build-fuzz/fuzz_tokenizer -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include "scheduler/detokenizer.h"
#include "server/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<ds::Tokenizer> tok = [] {
    const char* dir = std::getenv("DS_TOKENIZER_DIR");
    auto t = ds::Tokenizer::Load(dir ? dir : "../shared/models/deepseek-v3");
    if (!t.ok()) std::abort();
    return std::move(t).value();
  }();
  std::string s(reinterpret_cast<const char*>(data), size);
  bool parse_special = size > 0 && (data[0] & 1);
  auto ids = tok->Encode(s, false, parse_special);
  std::string fixed = ds::Utf8Lossy(s);
  if (tok->Decode(ids) != fixed) std::abort();
  ds::DeltaDetokenizer d(tok.get(), false);
  std::string streamed;
  for (int32_t id : ids) {
    std::string delta = d.Add(id);
    if (!ds::IsValidUtf8(delta)) std::abort();
    streamed += delta;
  }
  streamed += d.Flush();
  if (streamed != fixed) std::abort();
  // Arbitrary ids (including out-of-range ones) decode to valid UTF-8.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 4 <= size && raw.size() < 64; i += 4) {
    int32_t v;
    std::memcpy(&v, data + i, 4);
    raw.push_back(v % 140000);
  }
  if (!ds::IsValidUtf8(tok->Decode(raw, (size & 1) != 0))) std::abort();
  return 0;
}
