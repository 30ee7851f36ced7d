// libFuzzer target for the safetensors header parser (SafetensorsFile::FromBuffer).
// Build: CC=clang CXX=clang++ cmake -B build-fuzz -DDS_FUZZ=ON -DDS_TESTS=OFF; run: scripts/fuzz.sh.
// Any input must give either a clean Status or views that lie inside the buffer; every byte of
// every view is read so ASan catches an out-of-bounds span.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = ds::SafetensorsFile::FromBuffer(data, size, "fuzz");
  if (!f.ok()) {
    if (f.status().message().empty()) std::abort();  // every error must say something
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& [name, v] : (*f)->tensors()) {
    if (v.data < data || v.data + v.nbytes > data + size) std::abort();
    uint64_t expect = ds::DTypeSize(v.dtype);
    for (int64_t d : v.shape) expect *= static_cast<uint64_t>(d);
    if (expect != v.nbytes) std::abort();
    for (size_t i = 0; i < v.nbytes; ++i) sink = sink ^ v.data[i];
  }
  for (const auto& [k, val] : (*f)->metadata()) sink = sink ^ static_cast<uint8_t>(k.size() + val.size());
  (void)sink;
  return 0;
}
