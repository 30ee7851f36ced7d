// The split-KV merge of absorbed-MLA decode's tensor-core paths, shared by their combine kernels
// (MlaDecodeTcCombineFast in mla_decode_tc.cu, MlaDecodeSm90Combine in mla_decode_sm90.cu) and
// the W_UV epilogue (mla_decode_uv.cu), so that all three compute the same bits: MergeSplits, or
// up to 1,024 splits (MlaDecodeSm90Combine and the W_UV epilogue) its two-step form below, the
// same values in the same order. Device code: include only from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace ds::cuda::mla {

// One (token, head) and 4 latent columns d .. d + 3 of the merge over max_splits splits:
// partials at ws + (base + s) * kv + d (fp32, each normalised by its own softmax sum), LSEs at
// lse[s] (natural log; -inf = an empty split, never written, not read). acc = sum_s w_s o_s and
// wsum = sum_s w_s with w_s = exp(lse_s - max_s lse_s), in split order; 8 splits' loads in flight
// (an empty split adds exact zeros). The caller finishes with acc * (1 / wsum) (0 if wsum == 0).
__device__ __forceinline__ void MergeSplits(const float* ws, const float* lse, int64_t base, int max_splits, int kv,
                                            int d, float4* acc_out, float* wsum_out) {
  constexpr int kBatch = 8;
  float gmax = -INFINITY;
#pragma unroll 8
  for (int s = 0; s < max_splits; ++s) gmax = fmaxf(gmax, lse[s]);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float wsum = 0.f;
  int s = 0;
  for (; s + kBatch <= max_splits; s += kBatch) {
    float w[kBatch];
    float4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float l = lse[s + u];
      w[u] = l == -INFINITY ? 0.f : expf(l - gmax);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u)  // empty splits (w = 0) were never written: not read
      v[u] = w[u] > 0.f ? *reinterpret_cast<const float4*>(ws + (base + s + u) * kv + d) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      wsum += w[u];
      acc.x += w[u] * v[u].x; acc.y += w[u] * v[u].y; acc.z += w[u] * v[u].z; acc.w += w[u] * v[u].w;
    }
  }
  for (; s < max_splits; ++s) {
    const float l = lse[s];
    if (l == -INFINITY) continue;
    const float w = expf(l - gmax);
    wsum += w;
    const float4 v = *reinterpret_cast<const float4*>(ws + (base + s) * kv + d);
    acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
  }
  *acc_out = acc;
  *wsum_out = wsum;
}

// MergeSplits in two steps for up to a block's shared-memory array of splits (session 35, the W_UV
// epilogue in mla_decode_uv.cu; session 36, MlaDecodeSm90Combine): MergeSplits reads the LSEs 8 at a time twice (its max, then its
// weights) and the partials 8 at a time, 3 x n / 8 dependent L2 round trips; these read the LSEs in
// one round and the partials 16 at a time. The same values in the same order, so the same bits
// (but for the sign of an exactly-zero sum: a split whose weight underflows to 0 adds 0 x 0 here,
// 0 x v in MergeSplits' tail).
// 1. Every thread of the block (threads of them) calls it: s_w[s] = w_s = exp(lse_s - max_s lse_s)
//    (0 for an empty split) for s < n, visible to the block on return (it ends with __syncthreads).
__device__ __forceinline__ void SplitWeightsToSmem(const float* lse, int n, float* s_w, int threads) {
  for (int s = threadIdx.x; s < n; s += threads) s_w[s] = lse[s];
  __syncthreads();
  float gmax = -INFINITY;  // every warp (lane-strided, then shuffles); the max is exact in any order
  for (int s = threadIdx.x & 31; s < n; s += 32) gmax = fmaxf(gmax, s_w[s]);
  gmax = dev::WarpMax(gmax);
  __syncthreads();  // every warp's LSE reads done before they become weights
  for (int s = threadIdx.x; s < n; s += threads) {
    const float l = s_w[s];
    s_w[s] = l == -INFINITY ? 0.f : expf(l - gmax);
  }
  __syncthreads();
}
// 2. MergeSplits' acc and wsum for columns d .. d + 3 with the weights of step 1.
__device__ __forceinline__ void MergeSplitsSmemWeights(const float* ws, const float* s_w, int64_t base, int n, int kv,
                                                       int d, float4* acc_out, float* wsum_out) {
  constexpr int kN = 16;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float wsum = 0.f;
  for (int s0 = 0; s0 < n; s0 += kN) {
    float w[kN];
    float4 v[kN];
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      w[u] = s0 + u < n ? s_w[s0 + u] : 0.f;
      v[u] = w[u] > 0.f ? *reinterpret_cast<const float4*>(ws + (base + s0 + u) * kv + d) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      wsum += w[u];
      acc.x += w[u] * v[u].x; acc.y += w[u] * v[u].y; acc.z += w[u] * v[u].z; acc.w += w[u] * v[u].w;
    }
  }
  *acc_out = acc;
  *wsum_out = wsum;
}

// The W_UV epilogue's per-lane part of one row's dot product (MlaDecodeCombineUvKernel in
// mla_decode_uv.cu, MlaAttnPersistent's phase 4): lane l holds the merged o_lat's latent columns
// 8 l .. 8 l + 7 and 256 + 8 l .. + 7 in xo (UvLaneColumns) and the row's same columns in w0 / w1
// (16-byte loads); fp32 FMAs in column order. The caller sums the lanes (WarpSum).
__device__ __forceinline__ void UvLaneColumns(const float* s_o, int lane, float (&xo)[16]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    xo[j] = s_o[8 * lane + j];
    xo[8 + j] = s_o[256 + 8 * lane + j];
  }
}
__device__ __forceinline__ float UvLaneDot(const float (&xo)[16], const uint4& w0, const uint4& w1) {
  float acc = 0.f;
  const uint4 w[2] = {w0, w1};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w[half]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 wf = __bfloat1622float2(w2[j]);
      acc = fmaf(xo[8 * half + 2 * j], wf.x, acc);
      acc = fmaf(xo[8 * half + 2 * j + 1], wf.y, acc);
    }
  }
  return acc;
}

}  // namespace ds::cuda::mla
