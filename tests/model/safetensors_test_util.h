// Test helpers: serialise tensors to the safetensors format in memory or on disk, and build
// raw files with a hand-written header (for malformed-file tests). Header-only, tests only.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "common/dtype.h"

namespace ds::testutil {

struct StTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // raw little-endian element bytes, numel * DTypeSize(dtype)
};

// A tensor of `dtype` and `shape` whose bytes are a deterministic pattern (byte i = seed + i).
inline StTensor PatternTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                              uint8_t seed = 1) {
  StTensor t{name, dtype, std::move(shape), {}};
  size_t n = DTypeSize(dtype);
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  t.bytes.resize(n);
  for (size_t i = 0; i < n; ++i) t.bytes[i] = static_cast<uint8_t>(seed + i);
  return t;
}

inline StTensor F32Tensor(const std::string& name, std::vector<int64_t> shape,
                          const std::vector<float>& values) {
  StTensor t{name, DType::kF32, std::move(shape), {}};
  t.bytes.resize(values.size() * 4);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// 8-byte little-endian header length + header + data.
inline std::vector<uint8_t> RawFile(const std::string& header, const std::vector<uint8_t>& data,
                                    uint64_t header_len_override = UINT64_MAX) {
  uint64_t n = header_len_override == UINT64_MAX ? header.size() : header_len_override;
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}

inline std::vector<uint8_t> RawFile(const std::string& header, size_t data_bytes) {
  return RawFile(header, std::vector<uint8_t>(data_bytes, 0));
}

// A valid safetensors file: tensors laid out in order, header padded with spaces to a multiple
// of 8 bytes (as the reference writer does).
inline std::vector<uint8_t> Serialize(const std::vector<StTensor>& tensors,
                                      const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::vector<uint8_t> data;
  for (const auto& t : tensors) {
    uint64_t b = data.size();
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    h[t.name] = {{"dtype", DTypeName(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {b, static_cast<uint64_t>(data.size())}}};
  }
  std::string hs = h.dump();
  while (hs.size() % 8 != 0) hs.push_back(' ');
  return RawFile(hs, data);
}

inline void WriteFile(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void WriteText(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("dsinfer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace ds::testutil
