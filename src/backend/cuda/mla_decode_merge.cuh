// The split-KV merge of absorbed-MLA decode's tensor-core paths, shared by their combine kernels
// (MlaDecodeTcCombineFast in mla_decode_tc.cu, MlaDecodeSm90Combine in mla_decode_sm90.cu) and
// the W_UV epilogue (mla_decode_uv.cu), so that all three compute the same bits. Device code:
// include only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace ds::cuda::mla
