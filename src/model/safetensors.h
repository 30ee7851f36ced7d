// Safetensors reader: mmap'd single files and sharded checkpoints
// (model.safetensors.index.json). Format: 8-byte little-endian header length N, N bytes of
// UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to the data section.
//
// Tensor data pointers are NOT necessarily aligned (the header length need not be a multiple
// of 8): read elements with memcpy or copy out.
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

// Parses the text of a model.safetensors.index.json: {"weight_map": {tensor: shard file name}}
// (other keys, e.g. "metadata", ignored). Errors (DATA_LOSS, prefixed with `label`): invalid
// UTF-8/JSON, not an object, no/invalid weight_map, non-string shard, a shard that is not a
// plain file name (contains '/' or is "..").
StatusOr<std::map<std::string, std::string>> ParseSafetensorsIndex(const std::string& text,
                                                                    const std::string& label);

// A checkpoint directory: model.safetensors, or model.safetensors.index.json + shards, or
// every *.safetensors in the directory (`dir` may also be a single .safetensors file).
// Tensor names are unique across shards (a duplicate is DATA_LOSS naming both files); with an
// index, every weight_map entry must be present in its shard.
class Checkpoint {
 public:
  static StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  const TensorView* Find(const std::string& name) const;
  std::vector<std::string> Names() const;  // sorted
  size_t size() const { return index_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  // Adds a file's tensors; a name already present is a DATA_LOSS naming both files.
  Status AddFile(std::unique_ptr<SafetensorsFile> f);
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace ds
