// libFuzzer target for model.safetensors.index.json parsing (ParseSafetensorsIndex).
// Any input must give either a clean Status or a map of tensor -> plain shard file name.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto m = ds::ParseSafetensorsIndex(text, "fuzz.index.json");
  if (!m.ok()) {
    if (m.status().message().empty()) std::abort();
    return 0;
  }
  for (const auto& [name, shard] : *m)
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") std::abort();
  return 0;
}
