// One pooled device allocator for the CUDA backend. Sizes are rounded up to a size class
// (512 B granules below 1 MiB, 2 MiB granules above); freed blocks go back to a per-class free
// list and are reused by later requests of the same class, so steady-state steps do no
// cudaMalloc/cudaFree. All memory comes from plain cudaMalloc (never managed memory).
// Thread-safe. Errors (out of memory) throw ds::CheckError naming the request and the pool state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ds::cuda {

class DeviceAllocator {
 public:
  // The process-wide pool for the current device.
  static DeviceAllocator& Get();

  void* Allocate(size_t bytes);
  void Free(void* ptr);
  // Returns cached (free) blocks to the driver.
  void ReleaseCached();

  size_t bytes_in_use() const;
  size_t bytes_cached() const;

 private:
  DeviceAllocator() = default;
  static size_t RoundUp(size_t bytes);
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;   // size class -> free blocks
  std::unordered_map<void*, size_t> live_;      // ptr -> size class
  size_t in_use_ = 0, cached_ = 0;
};

// RAII device buffer from the pool. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { Reset(bytes); }
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) { Release(); ptr_ = o.ptr_; bytes_ = o.bytes_; o.ptr_ = nullptr; o.bytes_ = 0; }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Reallocates only when `bytes` exceeds the current capacity (contents are not kept).
  void Reserve(size_t bytes) { if (bytes > bytes_) Reset(bytes); }
  void Reset(size_t bytes);
  void Release();
  void* get() const { return ptr_; }
  template <typename T> T* as() const { return static_cast<T*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ds::cuda
