// Safetensors reader: mmap'd single files and sharded checkpoints
// (model.safetensors.index.json). Format: 8-byte little-endian header length N, N bytes of
// UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to the data section.
//
// Hardened: every malformed input is a distinct, clear Status (never a crash): header length
// bounded and inside the file, valid UTF-8 JSON object, known dtypes, every span inside the
// data section, spans non-overlapping, span length == product(shape) * dtype size with
// overflow-checked arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace ds {

// One tensor's view into a mapped file. `data` stays valid while its file object lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // mmaps `path` and parses its header.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses an in-memory buffer (not copied: it must outlive the object). For tests and fuzzing.
  static StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(const uint8_t* data, size_t size,
                                                               const std::string& label);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const TensorView* Find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  Status Parse(const uint8_t* data, size_t size);
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: model.safetensors, or model.safetensors.index.json + shards, or
// every *.safetensors in the directory. Tensor names are unique across shards.
class Checkpoint {
 public:
  static StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  const TensorView* Find(const std::string& name) const;
  std::vector<std::string> Names() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace ds
