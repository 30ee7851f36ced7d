// Device side of the MoE combine + residual + RMSNorm (include only from .cu), for a block of any
// size: the routed experts' down GEMM (skinny_gemm.cu, SkinnyCombineEpilogue) runs it in the
// last of its blocks to finish. It computes MoeCombineNormKernel's row t bit for bit: the same
// fp32 operations per element in the same order (moe_combine_norm.h), and the sum of squares
// reduced exactly as BlockSum over the kernel's block size VT = norm::RmsNormThreads(d).
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_combine_norm.h"
#include "backend/cuda/rmsnorm.cuh"

namespace ds::cuda::combine {

// Virtual threads a real thread plays at most (VT / blockDim.x: 1024 over 128 threads; SkinnyGemm
// checks VT / blockDim.x <= 8 on the host before it launches the epilogue), and the
// routed slots a token may have here (the slots' positions and weights staged in shared memory).
inline constexpr int kMaxVirtual = 8;
inline constexpr int kMaxSlots = 16;

// Row t of MoeCombineNorm(p) by the calling block (blockDim.x a multiple of 32 dividing VT, VT /
// blockDim.x <= kMaxVirtual, top_k <= kSlots <= kMaxSlots; every thread must call it). Real
// thread r plays the kernel's threads v = r + blockDim.x * k: each takes the kernel thread's
// elements i = v, v + VT, ..., and the reduction is BlockSum's over VT threads: each virtual
// warp's butterfly (virtual warp r / 32 + (blockDim.x / 32) k lies in real warp r / 32, at the
// same lanes), then the VT / 32 warp sums by one butterfly. An element's routed rows are all
// loaded before they are added (in slot order). Reads y, base and residual through L2 (__ldcg): y
// comes from other blocks of the calling grid. red: >= 32 floats, s_pos / s_w: >= kMaxSlots of
// shared memory.
//
// Compact code: the element loops are not unrolled, only the kSlots slot loops are, so the block
// runs a few hundred instructions (CombineNormRow picks kSlots 8 where top_k allows). In a
// SkinnyGemm epilogue only the last block runs this code, once per launch, with its
// instructions cold. Measured on V2-Lite's o_proj (ncu, session 10 runs 2, 6, 7): 26 us fused
// with the element loops unrolled over 16 slots, 33 us with every load staged in registers first
// (more code), 17.5-19 us in this form, against 6 us for the plain o_proj plus 3.6 us for
// RmsNorm: code size matters (cold instruction fetches, our reading; not measured directly), and
// so do one 256-thread block's dependent passes over a 2,048-wide row.
template <typename T, int kSlots>
__device__ __forceinline__ void CombineNormRowSlots(const MoeCombineNormParams& p, int64_t t, float* red,
                                                    int32_t* s_pos, float* s_w) {
  static_assert(kSlots >= 1 && kSlots <= kMaxSlots, "slots");
  const int rt = blockDim.x, vt = norm::RmsNormThreads(p.d), kv = vt / rt;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T* y = static_cast<const T*>(p.y);
  const float* fy = static_cast<const float*>(p.y);
  float* res = p.residual ? p.residual + t * p.ldres : nullptr;
  const int top_k = static_cast<int>(p.top_k);
  __syncthreads();  // red, s_pos and s_w may still be read for the previous row
  if (threadIdx.x < top_k) {
    s_pos[threadIdx.x] = __ldcg(p.pos + t * top_k + threadIdx.x);
    s_w[threadIdx.x] = __ldcg(p.weights + t * top_k + threadIdx.x);
  }
  __syncthreads();
#pragma unroll 1
  for (int k = 0; k < kv; ++k) {
    float ss = 0.f;
#pragma unroll 1
    for (int64_t i = threadIdx.x + int64_t{k} * rt; i < p.d; i += vt) {
      float yv[kSlots];
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int32_t r = j < top_k ? s_pos[j] : -1;
        yv[j] = r >= 0 ? dev::ToF(__ldcg(y + static_cast<int64_t>(r) * p.ldy + i)) : 0.f;
      }
      float acc = p.base ? __ldcg(p.base + t * p.ld_base + i) : 0.f;
#pragma unroll 1
      for (int s = 0; s < p.num_shared; ++s) acc += __ldcg(fy + (p.shared_row0 + s * p.n + t) * p.ldy + i);
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        if (j >= top_k || s_pos[j] < 0) continue;
        float v = yv[j];
        if (p.round_y_bf16) v = __bfloat162float(__float2bfloat16_rn(v));
        acc += s_w[j] * v;
      }
      if (p.moe_out) p.moe_out[t * p.ld_moe_out + i] = acc;
      if (res) {
        float v = acc;
        v += __ldcg(res + i);
        res[i] = v;
        ss += v * v;
      }
    }
    // Virtual warp warp + (rt / 32) k: its butterfly (every lane of the warp runs this k).
    const float wsum = dev::WarpSum(ss);
    if (lane == 0) red[warp + (rt >> 5) * k] = wsum;
  }
  if (!res) return;
  __syncthreads();
  const float total = dev::WarpSum(lane < (vt >> 5) ? red[lane] : 0.f);
  const float inv = rsqrtf(total / static_cast<float>(p.d) + p.eps);
#pragma unroll 1
  for (int k = 0; k < kv; ++k) {
#pragma unroll 1
    for (int64_t i = threadIdx.x + int64_t{k} * rt; i < p.d; i += vt) {
      const float o = res[i] * inv * p.norm_weight[i];
      p.out[t * p.ldout + i] = o;
      if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
    }
  }
}

// CombineNormRowSlots with 8 slot registers where top_k fits them (V2-Lite's 6, V3's 8), else 16.
template <typename T>
__device__ __forceinline__ void CombineNormRow(const MoeCombineNormParams& p, int64_t t, float* red, int32_t* s_pos,
                                               float* s_w) {
  if (p.top_k <= 8) CombineNormRowSlots<T, 8>(p, t, red, s_pos, s_w);
  else CombineNormRowSlots<T, kMaxSlots>(p, t, red, s_pos, s_w);
}

}  // namespace ds::cuda::combine
