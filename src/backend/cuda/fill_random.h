// Device-side random fills for benchmarks (dsinfer bench kernels): large inputs without a
// host round trip. Counter-based hash (SplitMix64 of seed + index), so a fill is reproducible.
//   FillUniformF32:  x[i] ~ U[lo, hi)
//   FillUniformBf16: x[i] ~ U[lo, hi), rounded to bf16
//   FillE4M3:        random finite e4m3 codes (NaN codes 0x7F/0xFF never written), |x| <= 448
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

void FillUniformF32(float* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream = nullptr);
void FillUniformBf16(__nv_bfloat16* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream = nullptr);
void FillE4M3(uint8_t* x, int64_t n, uint64_t seed, cudaStream_t stream = nullptr);
// Device-to-device copy by an SM kernel (16-byte loads/stores, grid-stride): the bandwidth
// ceiling for kernels, which a cudaMemcpyAsync captured in a graph (copy engine) may not reach.
// bytes and both pointers must be multiples of 16.
void CopyDeviceBytes(void* dst, const void* src, int64_t bytes, cudaStream_t stream = nullptr);

}  // namespace ds::cuda
