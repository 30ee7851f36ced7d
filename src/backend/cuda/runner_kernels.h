// Small data-movement kernels used by the CUDA model runner (cuda_runner.cpp): gathers of
// latent cache rows and of token rows, dtype conversion, strided copies, and the seeded
// random fill behind --load-format dummy.
// pdl (the gathers, conversions and copies): launch as a programmatic dependent of the previous
// kernel in the stream (launch.cuh, CudaRunnerOptions::pdl); same results either way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

// For n context positions of one or more sequences: row j comes from cache row
// slots[j] ([.., L] bf16). Writes lat16[j] = the whole row (bf16, ld L) and rope32[j] = its
// last `rope` channels as fp32 (ld rope).
void GatherLatentRows(const __nv_bfloat16* cache, const int64_t* slots, int64_t n, int64_t L, int64_t rope,
                      __nv_bfloat16* lat16, float* rope32, cudaStream_t s, bool pdl = false);

// dst[i, :] = src[idx[i], :] (row_bytes each; strides in bytes). idx == nullptr: identity.
void GatherRows(const void* src, int64_t src_stride, const int32_t* idx, int64_t n, int64_t row_bytes, void* dst,
                int64_t dst_stride, cudaStream_t s, bool pdl = false);
// Overlap scheduling's token ids: ids[i] = prev[rows[i]] where rows[i] >= 0, else unchanged
// (i < n; rows[i] < the previous step's sampled rows, checked by the caller).
void ResolvePrevIds(int32_t* ids, const int32_t* rows, const int32_t* prev, int64_t n, cudaStream_t s);
// dst[idx[i], :] = src[i, :].
void ScatterRows(const void* src, int64_t src_stride, const int32_t* idx, int64_t n, int64_t row_bytes, void* dst,
                 int64_t dst_stride, cudaStream_t s, bool pdl = false);

// out[r, c] (bf16, ld_out) = in[r, c] (fp32, ld_in) for r < rows, c < cols.
void F32ToBf16(const float* in, int64_t ld_in, __nv_bfloat16* out, int64_t ld_out, int64_t rows, int64_t cols,
               cudaStream_t s, bool pdl = false);
// Split fp32 into bf16 hi = bf16(x) and, when lo != nullptr, lo = bf16(x - hi): hi + lo
// carries ~16 mantissa bits, so two bf16 GEMMs (hi, then lo accumulated) give near-fp32
// activations on bf16 tensor cores.
void SplitBf16(const float* in, int64_t ld_in, int64_t rows, int64_t cols, __nv_bfloat16* hi, __nv_bfloat16* lo,
               int64_t ld_out, cudaStream_t s, bool pdl = false);
// out[r, c] (fp32) = in[r, c] (fp32), strided, r < rows, c < cols.
void Copy2D(const float* in, int64_t ld_in, float* out, int64_t ld_out, int64_t rows, int64_t cols, cudaStream_t s,
            bool pdl = false);

// Seeded fills for dummy weights: element i gets a value from a counter-based hash of
// (seed, i): uniform in [-a, a] (bf16 or fp32), or e4m3 codes of uniform [-448, 448]
// values; Fill sets every element to v.
void RandomUniformBf16(__nv_bfloat16* p, int64_t n, float a, uint64_t seed, cudaStream_t s);
void RandomUniformF32(float* p, int64_t n, float a, uint64_t seed, cudaStream_t s);
void RandomFp8(uint8_t* p, int64_t n, uint64_t seed, cudaStream_t s);
void FillF32(float* p, int64_t n, float v, cudaStream_t s);

// Dequantises e4m3 [N, K] with block scales [ceil(N/128), ceil(K/128)] to bf16 [N, K].
void DequantFp8ToBf16(const uint8_t* q, const float* scales, int64_t N, int64_t K, __nv_bfloat16* out,
                      cudaStream_t s);

}  // namespace ds::cuda
