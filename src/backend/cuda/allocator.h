// Pooled device allocators for the CUDA backend, one per device. Sizes are rounded up to a size class
// (512 B granules below 1 MiB, 2 MiB granules above); freed blocks go back to a per-class free
// list and are reused by later requests of the same class, so steady-state steps do no
// cudaMalloc/cudaFree. All memory comes from plain cudaMalloc (never managed memory).
// Thread-safe. Errors (out of memory) throw ds::CheckError naming the request and the pool state.
// Per device because a cached block belongs to the device that allocated it: one process-wide
// pool handed device 0's freed blocks to a runner on device 1 (illegal address on the H200 x2,
// session 6 run 5: CudaMultiDevice.* and `serve --dp-size 2`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ds::cuda {

class DeviceAllocator {
 public:
  // The pool of the calling thread's current device (cudaGetDevice).
  static DeviceAllocator& Get();
  // The pool of device `device` (0 <= device < kMaxDevices); created on first use.
  static DeviceAllocator& ForDevice(int device);
  static constexpr int kMaxDevices = 64;

  // Allocate: cudaMalloc runs on this pool's device (the caller's current device is restored).

  void* Allocate(size_t bytes);
  void Free(void* ptr);
  // Returns cached (free) blocks to the driver.
  void ReleaseCached();
  int device() const { return device_; }

  size_t bytes_in_use() const;
  size_t bytes_cached() const;

 private:
  explicit DeviceAllocator(int device) : device_(device) {}
  static size_t RoundUp(size_t bytes);
  const int device_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;   // size class -> free blocks
  std::unordered_map<void*, size_t> live_;      // ptr -> size class
  size_t in_use_ = 0, cached_ = 0;
};

// RAII device buffer from the current device's pool (at Reset); freed into that same pool
// whatever the current device is at release. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { Reset(bytes); }
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), pool_(o.pool_) {
    o.ptr_ = nullptr; o.bytes_ = 0; o.pool_ = nullptr;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      ptr_ = o.ptr_; bytes_ = o.bytes_; pool_ = o.pool_;
      o.ptr_ = nullptr; o.bytes_ = 0; o.pool_ = nullptr;
    }
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
  DeviceAllocator* pool_ = nullptr;  // the pool ptr_ came from (its device's)
};

// RAII page-locked host buffer (cudaHostAlloc, portable): the host side of small per-step
// copies, so cudaMemcpyAsync needs no staging copy and runs as one DMA in stream order. The
// caller keeps the contents unchanged until the copy that reads them has completed. Move-only;
// errors throw ds::CheckError.
class PinnedHostBuffer {
 public:
  // Reallocates only when `bytes` exceeds the current capacity (contents are not kept).
  void Reserve(size_t bytes);
  void* get() const { return ptr_.get(); }
  template <typename T> T* as() const { return static_cast<T*>(ptr_.get()); }
  size_t size() const { return ptr_ ? bytes_ : 0; }

 private:
  struct FreeHost {
    void operator()(void* p) const;  // cudaFreeHost (unchecked: runs in destructors)
  };
  std::unique_ptr<void, FreeHost> ptr_;
  size_t bytes_ = 0;
};

}  // namespace ds::cuda
