// Device side of RoPE (include only from .cu): one warp's rotation of one head, shared by
// RopeKernel / KvCacheWriteKernel (rope.cu) and the fused decode kv-latent norm + RoPE + cache
// write (mla_kv_rope_fused.cu), so that every caller computes the same fp32 expressions (bit-
// identical outputs). The math is documented in rope.h.
#pragma once

#include "backend/cuda/common.cuh"

namespace ds::cuda::rope {

constexpr int kMaxPairsPerLane = 4;  // rope_dim <= 256

// One warp (all 32 lanes) rotates one head's rope channels at `v` (fp32, half = rope_dim / 2
// pairs) and writes the result to `out` (may equal v) as TOut: out[i] = a c - b s,
// out[i + half] = b c + a s, (a, b) = (v[2i], v[2i+1]) interleaved, else (v[i], v[i + half]).
template <typename TOut>
__device__ __forceinline__ void RotateHead(const float* v, TOut* out, int half, int pos, const float* cos,
                                           const float* sin, bool interleave) {
  const int lane = threadIdx.x & 31;
  float a[kMaxPairsPerLane], b[kMaxPairsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      a[j] = interleave ? v[2 * i] : v[i];
      b[j] = interleave ? v[2 * i + 1] : v[i + half];
    }
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      const float c = cos[static_cast<int64_t>(pos) * half + i], s = sin[static_cast<int64_t>(pos) * half + i];
      out[i] = dev::FromF<TOut>(a[j] * c - b[j] * s);
      out[i + half] = dev::FromF<TOut>(b[j] * c + a[j] * s);
    }
  }
}

// ApplyRope's work for one (token, head) item at an in-range position, by one warp: rotates
// the rope_dim fp32 channels at v in place and, when o2 != nullptr, copies the rotated values
// to o2 (RopeParams::out2).
__device__ __forceinline__ void RopeHeadInPlace(float* v, int64_t rope_dim, int pos, const float* cos,
                                                const float* sin, bool interleave, float* o2) {
  RotateHead<float>(v, v, static_cast<int>(rope_dim / 2), pos, cos, sin, interleave);
  if (o2 != nullptr) {
    __syncwarp();  // the other lanes' rotated values
    for (int64_t i = threadIdx.x & 31; i < rope_dim; i += 32) o2[i] = v[i];
  }
}

// RopeAndWriteKvCache's k_pe for one token at an in-range position, by one warp: rotates the
// rope_dim fp32 channels at k_pe (not modified) into dst as bf16 (the cache row's rope part).
__device__ __forceinline__ void RopeKpeToCache(const float* k_pe, __nv_bfloat16* dst, int64_t rope_dim, int pos,
                                               const float* cos, const float* sin, bool interleave) {
  RotateHead<__nv_bfloat16>(k_pe, dst, static_cast<int>(rope_dim / 2), pos, cos, sin, interleave);
}

}  // namespace ds::cuda::rope
