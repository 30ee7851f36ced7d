#include "backend/cuda/runner_kernels.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace ds::cuda {
namespace {

__global__ void GatherLatentKernel(const __nv_bfloat16* cache, const int64_t* slots, int64_t L, int64_t rope,
                                   __nv_bfloat16* lat16, float* rope32) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t j = blockIdx.x;
  const __nv_bfloat16* src = cache + slots[j] * L;
  for (int64_t c = threadIdx.x; c < L; c += blockDim.x) {
    const __nv_bfloat16 v = src[c];
    lat16[j * L + c] = v;
    if (c >= L - rope) rope32[j * rope + (c - (L - rope))] = __bfloat162float(v);
  }
}

__global__ void GatherRowsKernel(const uint8_t* src, int64_t ss, const int32_t* idx, int64_t row_bytes, uint8_t* dst,
                                 int64_t ds, bool scatter) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t i = blockIdx.x;
  const int64_t r = idx ? idx[i] : i;
  const uint8_t* s = src + (scatter ? i : r) * ss;
  uint8_t* d = dst + (scatter ? r : i) * ds;
  if (row_bytes % 16 == 0 && ss % 16 == 0 && ds % 16 == 0 && (reinterpret_cast<uintptr_t>(src) % 16 == 0) &&
      (reinterpret_cast<uintptr_t>(dst) % 16 == 0)) {
    for (int64_t c = threadIdx.x; c < row_bytes / 16; c += blockDim.x)
      reinterpret_cast<uint4*>(d)[c] = reinterpret_cast<const uint4*>(s)[c];
  } else {
    for (int64_t c = threadIdx.x; c < row_bytes; c += blockDim.x) d[c] = s[c];
  }
}

// Row-wise elementwise kernels: grid (rows, column slices of kColsPerBlock), so a decode-size
// pass (1-8 rows of 2K-11K columns) spreads over several SMs instead of one block looping
// over a whole row (ncu, session 5 run 3: 14-18 us per call at batch 1 as one block).
constexpr int kRowThreads = 256;
constexpr int kRowPerThread = 4;
constexpr int64_t kColsPerBlock = kRowPerThread * kRowThreads;

// Applies store(c, v) to this thread's kRowPerThread columns c0 + k * kRowThreads (< end) of
// one row slice, with every fp32 input loaded before any store: a load-store-load loop made
// them a chain of dependent round trips (stores issue in order behind the load they store).
// Launched with kRowThreads threads.
template <typename Store>
__device__ __forceinline__ void RowSlice(const float* in_row, int64_t c0, int64_t end, Store store) {
  float v[kRowPerThread];
#pragma unroll
  for (int k = 0; k < kRowPerThread; ++k) {
    const int64_t c = c0 + k * kRowThreads;
    v[k] = c < end ? in_row[c] : 0.f;
  }
#pragma unroll
  for (int k = 0; k < kRowPerThread; ++k) {
    const int64_t c = c0 + k * kRowThreads;
    if (c < end) store(c, v[k]);
  }
}

__global__ void F32ToBf16Kernel(const float* in, int64_t ld_in, __nv_bfloat16* out, int64_t ld_out, int64_t cols) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t r = blockIdx.x, end = std::min<int64_t>(cols, (blockIdx.y + 1) * kColsPerBlock);
  RowSlice(in + r * ld_in, blockIdx.y * kColsPerBlock + threadIdx.x, end,
           [&](int64_t c, float v) { out[r * ld_out + c] = __float2bfloat16_rn(v); });
}

__global__ void SplitKernel(const float* in, int64_t ld_in, int64_t cols, __nv_bfloat16* hi, __nv_bfloat16* lo,
                            int64_t ld_out) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t r = blockIdx.x, end = std::min<int64_t>(cols, (blockIdx.y + 1) * kColsPerBlock);
  RowSlice(in + r * ld_in, blockIdx.y * kColsPerBlock + threadIdx.x, end, [&](int64_t c, float v) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi[r * ld_out + c] = h;
    if (lo) lo[r * ld_out + c] = __float2bfloat16_rn(v - __bfloat162float(h));
  });
}

__global__ void Copy2DKernel(const float* in, int64_t ld_in, float* out, int64_t ld_out, int64_t cols) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t r = blockIdx.x, end = std::min<int64_t>(cols, (blockIdx.y + 1) * kColsPerBlock);
  RowSlice(in + r * ld_in, blockIdx.y * kColsPerBlock + threadIdx.x, end,
           [&](int64_t c, float v) { out[r * ld_out + c] = v; });
}

// Grid of a row-wise kernel: rows x column slices (rows beyond 2^31 - 1 never occur: a pass
// holds at most max_num_batched_tokens rows).
dim3 RowGrid(int64_t rows, int64_t cols) {
  DS_CHECK(rows < (int64_t{1} << 31) && cols > 0) << "row-wise kernel: " << rows << " rows x " << cols << " columns";
  const int64_t slices = (cols + kColsPerBlock - 1) / kColsPerBlock;
  DS_CHECK(slices <= 65535) << "row-wise kernel: " << cols << " columns";
  return dim3(static_cast<unsigned>(rows), static_cast<unsigned>(slices));
}

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ float U11(uint64_t seed, int64_t i) {
  return static_cast<float>((Mix(seed ^ Mix(static_cast<uint64_t>(i))) >> 40) * 0x1.0p-24) * 2.f - 1.f;
}

__global__ void RandBf16Kernel(__nv_bfloat16* p, int64_t n, float a, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(a * U11(seed, i));
}
__global__ void RandF32Kernel(float* p, int64_t n, float a, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = a * U11(seed, i);
}
__global__ void RandFp8Kernel(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = dev::F32ToE4M3(448.f * U11(seed, i));
}
__global__ void FillKernel(float* p, int64_t n, float v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = v;
}
__global__ void DequantKernel(const uint8_t* q, const float* scales, int64_t N, int64_t K, __nv_bfloat16* out) {
  const int64_t kb = (K + 127) / 128;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N * K;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, c = i % K;
    out[i] = __float2bfloat16_rn(dev::E4M3ToF32(q[i]) * scales[(r / 128) * kb + c / 128]);
  }
}

int GridFor(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536)); }

}  // namespace

void GatherLatentRows(const __nv_bfloat16* cache, const int64_t* slots, int64_t n, int64_t L, int64_t rope,
                      __nv_bfloat16* lat16, float* rope32, cudaStream_t s, bool pdl) {
  if (n == 0) return;
  LaunchKernel(GatherLatentKernel, n, 128, 0, s, pdl, cache, slots, L, rope, lat16, rope32);
  DS_CUDA_CHECK_LAUNCH("GatherLatentKernel");
}

void GatherRows(const void* src, int64_t src_stride, const int32_t* idx, int64_t n, int64_t row_bytes, void* dst,
                int64_t dst_stride, cudaStream_t s, bool pdl) {
  if (n == 0) return;
  LaunchKernel(GatherRowsKernel, n, 128, 0, s, pdl, static_cast<const uint8_t*>(src), src_stride, idx, row_bytes,
               static_cast<uint8_t*>(dst), dst_stride, false);
  DS_CUDA_CHECK_LAUNCH("GatherRowsKernel");
}

__global__ void ResolvePrevIdsKernel(int32_t* ids, const int32_t* rows, const int32_t* prev, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    if (rows[i] >= 0) ids[i] = prev[rows[i]];
}

void ResolvePrevIds(int32_t* ids, const int32_t* rows, const int32_t* prev, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const int threads = 128;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 1024);
  ResolvePrevIdsKernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(ids, rows, prev, n);
  DS_CUDA_CHECK_LAUNCH("ResolvePrevIdsKernel");
}

void ScatterRows(const void* src, int64_t src_stride, const int32_t* idx, int64_t n, int64_t row_bytes, void* dst,
                 int64_t dst_stride, cudaStream_t s, bool pdl) {
  if (n == 0) return;
  LaunchKernel(GatherRowsKernel, n, 128, 0, s, pdl, static_cast<const uint8_t*>(src), src_stride, idx, row_bytes,
               static_cast<uint8_t*>(dst), dst_stride, true);
  DS_CUDA_CHECK_LAUNCH("ScatterRowsKernel");
}

void F32ToBf16(const float* in, int64_t ld_in, __nv_bfloat16* out, int64_t ld_out, int64_t rows, int64_t cols,
               cudaStream_t s, bool pdl) {
  if (rows == 0) return;
  if (cols == 0) return;
  LaunchKernel(F32ToBf16Kernel, RowGrid(rows, cols), kRowThreads, 0, s, pdl, in, ld_in, out, ld_out, cols);
  DS_CUDA_CHECK_LAUNCH("F32ToBf16Kernel");
}

void SplitBf16(const float* in, int64_t ld_in, int64_t rows, int64_t cols, __nv_bfloat16* hi, __nv_bfloat16* lo,
               int64_t ld_out, cudaStream_t s, bool pdl) {
  if (rows == 0) return;
  if (cols == 0) return;
  LaunchKernel(SplitKernel, RowGrid(rows, cols), kRowThreads, 0, s, pdl, in, ld_in, cols, hi, lo, ld_out);
  DS_CUDA_CHECK_LAUNCH("SplitKernel");
}

void Copy2D(const float* in, int64_t ld_in, float* out, int64_t ld_out, int64_t rows, int64_t cols, cudaStream_t s,
            bool pdl) {
  if (rows == 0) return;
  if (cols == 0) return;
  LaunchKernel(Copy2DKernel, RowGrid(rows, cols), kRowThreads, 0, s, pdl, in, ld_in, out, ld_out, cols);
  DS_CUDA_CHECK_LAUNCH("Copy2DKernel");
}

void RandomUniformBf16(__nv_bfloat16* p, int64_t n, float a, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  RandBf16Kernel<<<GridFor(n), 256, 0, s>>>(p, n, a, seed);
  DS_CUDA_CHECK_LAUNCH("RandBf16Kernel");
}
void RandomUniformF32(float* p, int64_t n, float a, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  RandF32Kernel<<<GridFor(n), 256, 0, s>>>(p, n, a, seed);
  DS_CUDA_CHECK_LAUNCH("RandF32Kernel");
}
void RandomFp8(uint8_t* p, int64_t n, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  RandFp8Kernel<<<GridFor(n), 256, 0, s>>>(p, n, seed);
  DS_CUDA_CHECK_LAUNCH("RandFp8Kernel");
}
void FillF32(float* p, int64_t n, float v, cudaStream_t s) {
  if (n == 0) return;
  FillKernel<<<GridFor(n), 256, 0, s>>>(p, n, v);
  DS_CUDA_CHECK_LAUNCH("FillKernel");
}
void DequantFp8ToBf16(const uint8_t* q, const float* scales, int64_t N, int64_t K, __nv_bfloat16* out,
                      cudaStream_t s) {
  if (N * K == 0) return;
  DequantKernel<<<GridFor(N * K), 256, 0, s>>>(q, scales, N, K, out);
  DS_CUDA_CHECK_LAUNCH("DequantKernel");
}

}  // namespace ds::cuda
