// Device side of RMSNorm (include only from .cu): the normalisation of one row by one block,
// shared by RmsNormKernel (rmsnorm.cu) and the fused decode kv-latent norm + RoPE + cache write
// (mla_kv_rope_fused.cu), so that both run the same fp32 operations in the same order
// (bit-identical outputs) when launched with the same block size (RmsNormThreads). The math
// is documented in rmsnorm.h.
#pragma once

#include "backend/cuda/common.cuh"

namespace ds::cuda::norm {

// Block size RmsNorm launches for rows of d elements. The sum of squares is reduced over the
// block's threads (thread i takes elements i, i + blockDim.x, ..., then BlockSum): another
// block size sums in another order.
constexpr int RmsNormThreads(int64_t d) { return d >= 1024 ? 1024 : 256; }

// Normalises one row of d elements; every thread of the block must call it (BlockSum).
// res != nullptr: res[i] += x[i] (in place) and the row normalised is res; else x.
// out[i] = v[i] * inv * weight[i] as TOut (may alias x or res); o16 (optional): also
// __float2bfloat16_rn of that fp32 value.
// Rows of 5..8 elements per thread (V3's hidden size 7168 over 1024 threads, q_lora 1536 over
// 256) take the staged form: each thread first loads all of its elements (x, and res), then
// stores / reduces, so the loads of a row overlap instead of alternating with stores (a decode
// row per block is latency-bound). Other rows take the loop form: at <= 4 per thread the staged
// form measured slower (V2-Lite 1 x 1K decode step 3.44 vs 3.39 ms, session 6 run 4; V3 8 layers
// 2.78 vs 2.83 ms faster). Both do the same fp32 operations in the same order per thread (v = x +
// res, ss += v * v over i ascending, o = v * inv * weight[i]), so they give the same bits.
inline constexpr int kStagedPerThread = 8, kStagedMinPerThread = 5;

template <typename TOut>
__device__ __forceinline__ void RmsNormRow(const float* x, float* res, const float* weight, TOut* out,
                                           __nv_bfloat16* o16, int64_t d, float eps) {
  __shared__ float red[32];
  float ss = 0.f;
  const int64_t bd = blockDim.x;
  if (d > (kStagedMinPerThread - 1) * bd && d <= kStagedPerThread * bd) {
    float v[kStagedPerThread], rv[kStagedPerThread];
#pragma unroll
    for (int e = 0; e < kStagedPerThread; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      v[e] = i < d ? x[i] : 0.f;
      rv[e] = res && i < d ? res[i] : 0.f;
    }
#pragma unroll
    for (int e = 0; e < kStagedPerThread; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      if (i < d) {
        if (res) { v[e] += rv[e]; res[i] = v[e]; }
        ss += v[e] * v[e];
      }
    }
    const float total = dev::BlockSum(ss, red);
    const float inv = rsqrtf(total / static_cast<float>(d) + eps);
#pragma unroll
    for (int e = 0; e < kStagedPerThread; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      if (i < d) {
        const float o = v[e] * inv * weight[i];
        out[i] = dev::FromF<TOut>(o);
        if (o16) o16[i] = __float2bfloat16_rn(o);
      }
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = x[i];
    if (res) { v += res[i]; res[i] = v; }
    ss += v * v;
  }
  const float total = dev::BlockSum(ss, red);
  const float inv = rsqrtf(total / static_cast<float>(d) + eps);
  const float* src = res ? res : x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float o = src[i] * inv * weight[i];
    out[i] = dev::FromF<TOut>(o);
    if (o16) o16[i] = __float2bfloat16_rn(o);
  }
}

// One block computes the bf16 RMSNorm of an fp32 row into shared memory (a persistent kernel's
// input norm in every block: MlaAttnPersistentParams::in_residual, LmHeadArgmaxParams::in_residual):
// xs[i] = bf16(v[i] * inv * w[i]), inv = rsqrt(sum(v^2) / d + eps), RmsNorm's per-element operations.
// Thread t loads float4s t, t + kThreads, ... of v and w (at most kV each, all in flight), sums
// x^2 + y^2 + z^2 + w^2 over them in order, then a warp butterfly, then the warps' sums in warp
// order (s_warp: kThreads / 32 floats). d % 4 == 0, d <= 4 kV kThreads; v, w 16-byte aligned.
// Every thread of the block must call it; xs is written when it returns only after a barrier.
template <int kV, int kThreads>
__device__ __forceinline__ void BlockRmsNormRowToBf16(const float* v, const float* w, int64_t d, float eps,
                                                      __nv_bfloat16* xs, float* s_warp) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024 && kV >= 1, "a block of whole warps");
  constexpr int kWarps = kThreads / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float4 rv[kV], wv[kV];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int64_t i = threadIdx.x + j * kThreads;
    if (i < d / 4) {
      rv[j] = reinterpret_cast<const float4*>(v)[i];
      wv[j] = reinterpret_cast<const float4*>(w)[i];
    }
  }
#pragma unroll
  for (int j = 0; j < kV; ++j)
    if (threadIdx.x + j * kThreads < d / 4)
      ss += rv[j].x * rv[j].x + rv[j].y * rv[j].y + rv[j].z * rv[j].z + rv[j].w * rv[j].w;
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (lane == 0) s_warp[warp] = ss;
  __syncthreads();
  float total = 0.f;
  for (int k = 0; k < kWarps; ++k) total += s_warp[k];
  const float inv = rsqrtf(total / static_cast<float>(d) + eps);
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int64_t i = threadIdx.x + j * kThreads;
    if (i < d / 4) {
      reinterpret_cast<__nv_bfloat162*>(xs)[2 * i] =
          __floats2bfloat162_rn(rv[j].x * inv * wv[j].x, rv[j].y * inv * wv[j].y);
      reinterpret_cast<__nv_bfloat162*>(xs)[2 * i + 1] =
          __floats2bfloat162_rn(rv[j].z * inv * wv[j].z, rv[j].w * inv * wv[j].w);
    }
  }
}

}  // namespace ds::cuda::norm
