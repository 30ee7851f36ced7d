#include "backend/cuda/allocator.h"

#include "backend/cuda/cuda_check.h"

namespace ds::cuda {

const char* CublasStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_<unknown>";
  }
}

DeviceAllocator& DeviceAllocator::Get() {
  int device = 0;
  DS_CUDA_CHECK(cudaGetDevice(&device));
  return ForDevice(device);
}

DeviceAllocator& DeviceAllocator::ForDevice(int device) {
  DS_CHECK(device >= 0 && device < kMaxDevices) << "DeviceAllocator: device " << device << " out of range";
  static std::mutex mu;
  static DeviceAllocator* pools[kMaxDevices] = {};  // never destroyed: outlive statics
  std::lock_guard<std::mutex> lock(mu);
  if (!pools[device]) pools[device] = new DeviceAllocator(device);
  return *pools[device];
}

namespace {
// Makes `device` current for its scope (a no-op when it already is); restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    DS_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) DS_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() {
    int cur = prev_;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_) (void)cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
};
}  // namespace

size_t DeviceAllocator::RoundUp(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t g = bytes < (1u << 20) ? 512 : (2u << 20);
  return (bytes + g - 1) / g * g;
}

void* DeviceAllocator::Allocate(size_t bytes) {
  const size_t cls = RoundUp(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.find(cls);
  void* p = nullptr;
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    cached_ -= cls;
  } else {
    DeviceScope on(device_);
    cudaError_t err = cudaMalloc(&p, cls);
    if (err == cudaErrorMemoryAllocation && cached_ > 0) {
      (void)cudaGetLastError();
      // Give the cache back and retry once.
      for (auto& [c, v] : free_) for (void* q : v) cudaFree(q);
      free_.clear();
      cached_ = 0;
      err = cudaMalloc(&p, cls);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      size_t fr = 0, tot = 0;
      cudaMemGetInfo(&fr, &tot);
      DS_CHECK(false) << "device allocation of " << bytes << " bytes failed ("
                      << cudaGetErrorString(err) << "); pool in use " << in_use_
                      << " B, device free " << fr << " of " << tot << " B";
    }
  }
  live_[p] = cls;
  in_use_ += cls;
  return p;
}

void DeviceAllocator::Free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  DS_CHECK(it != live_.end()) << "DeviceAllocator::Free of a pointer it did not allocate";
  const size_t cls = it->second;
  live_.erase(it);
  in_use_ -= cls;
  free_[cls].push_back(ptr);
  cached_ += cls;
}

void DeviceAllocator::ReleaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceScope on(device_);
  for (auto& [c, v] : free_) for (void* q : v) cudaFree(q);
  free_.clear();
  cached_ = 0;
}

size_t DeviceAllocator::bytes_in_use() const { std::lock_guard<std::mutex> l(mu_); return in_use_; }
size_t DeviceAllocator::bytes_cached() const { std::lock_guard<std::mutex> l(mu_); return cached_; }

void DeviceBuffer::Reset(size_t bytes) {
  Release();
  if (bytes == 0) return;
  pool_ = &DeviceAllocator::Get();
  ptr_ = pool_->Allocate(bytes);
  bytes_ = bytes;
}

void DeviceBuffer::Release() {
  if (ptr_) pool_->Free(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  pool_ = nullptr;
}

void PinnedHostBuffer::Reserve(size_t bytes) {
  if (ptr_ && bytes <= bytes_) return;
  ptr_.reset();
  void* p = nullptr;
  DS_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  ptr_.reset(p);
  bytes_ = bytes;
}

void PinnedHostBuffer::FreeHost::operator()(void* p) const { cudaFreeHost(p); }

}  // namespace ds::cuda
