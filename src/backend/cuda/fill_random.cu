#include "backend/cuda/fill_random.h"

#include "backend/cuda/cuda_check.h"

namespace ds::cuda {
namespace {

__device__ __forceinline__ uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ float U01(uint64_t seed, int64_t i) {
  return static_cast<float>(SplitMix64(seed * 0x100000001B3ull + static_cast<uint64_t>(i)) >> 40) * 0x1.0p-24f;
}

__global__ void FillF32Kernel(float* x, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = lo + (hi - lo) * U01(seed, i);
}
__global__ void FillBf16Kernel(__nv_bfloat16* x, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __float2bfloat16_rn(lo + (hi - lo) * U01(seed, i));
}
__global__ void FillE4M3Kernel(uint8_t* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint8_t v = static_cast<uint8_t>(SplitMix64(seed * 0x100000001B3ull + static_cast<uint64_t>(i)) >> 56);
    if ((v & 0x7F) == 0x7F) v &= 0xFE;  // NaN code -> the largest finite magnitude (448)
    x[i] = v;
  }
}
constexpr int kGrid = 132 * 8, kBlock = 256;

__global__ void __launch_bounds__(512) CopyKernel(uint4* __restrict__ dst, const uint4* __restrict__ src, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {  // four independent 16-byte loads in flight
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

}  // namespace

void FillUniformF32(float* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n <= 0) return;
  FillF32Kernel<<<kGrid, kBlock, 0, stream>>>(x, n, seed, lo, hi);
  DS_CUDA_CHECK_LAUNCH("FillF32Kernel");
}
void FillUniformBf16(__nv_bfloat16* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n <= 0) return;
  FillBf16Kernel<<<kGrid, kBlock, 0, stream>>>(x, n, seed, lo, hi);
  DS_CUDA_CHECK_LAUNCH("FillBf16Kernel");
}
void FillE4M3(uint8_t* x, int64_t n, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  FillE4M3Kernel<<<kGrid, kBlock, 0, stream>>>(x, n, seed);
  DS_CUDA_CHECK_LAUNCH("FillE4M3Kernel");
}

void CopyDeviceBytes(void* dst, const void* src, int64_t bytes, cudaStream_t stream) {
  DS_CHECK(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0)
      << "CopyDeviceBytes: 16-byte multiples";
  if (bytes <= 0) return;
  CopyKernel<<<132 * 4, 512, 0, stream>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), bytes / 16);
  DS_CUDA_CHECK_LAUNCH("CopyKernel");
}

}  // namespace ds::cuda
