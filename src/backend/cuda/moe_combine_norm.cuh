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
// blockDim.x <= kMaxVirtual, top_k <= kMaxSlots; every thread must call it). Real thread r plays
// the kernel's threads v = r + blockDim.x * k: each takes the kernel thread's elements i = v,
// v + VT, ..., and the reduction is BlockSum's over VT threads: each virtual warp's butterfly
// (virtual warp r / 32 + (blockDim.x / 32) k lies in real warp r / 32, at the same lanes), then
// the VT / 32 warp sums by one butterfly. An element's routed rows are all loaded before they are
// added (in slot order). Reads y, base and residual through L2 (__ldcg): y comes from other
// blocks of the calling grid. red: >= 32 floats, s_pos / s_w: >= kMaxSlots of shared memory.
template <typename T>
__device__ __forceinline__ void CombineNormRowAnyBlock(const MoeCombineNormParams& p, int64_t t, float* red,
                                                       int32_t* s_pos, float* s_w) {
  const int rt = blockDim.x, vt = norm::RmsNormThreads(p.d), kv = vt / rt;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T* y = static_cast<const T*>(p.y);
  const float* fy = static_cast<const float*>(p.y);
  float* res = p.residual ? p.residual + t * p.ldres : nullptr;
  __syncthreads();  // red, s_pos and s_w may still be read for the previous row
  if (threadIdx.x < p.top_k) {
    s_pos[threadIdx.x] = __ldcg(p.pos + t * p.top_k + threadIdx.x);
    s_w[threadIdx.x] = __ldcg(p.weights + t * p.top_k + threadIdx.x);
  }
  __syncthreads();
  for (int k = 0; k < kv; ++k) {
    float ss = 0.f;
    for (int64_t i = threadIdx.x + int64_t{k} * rt; i < p.d; i += vt) {
      float yv[kMaxSlots];
#pragma unroll
      for (int j = 0; j < kMaxSlots; ++j) {
        const int32_t r = j < p.top_k ? s_pos[j] : -1;
        yv[j] = r >= 0 ? dev::ToF(__ldcg(y + static_cast<int64_t>(r) * p.ldy + i)) : 0.f;
      }
      float acc = p.base ? __ldcg(p.base + t * p.ld_base + i) : 0.f;
      for (int s = 0; s < p.num_shared; ++s) acc += __ldcg(fy + (p.shared_row0 + s * p.n + t) * p.ldy + i);
#pragma unroll
      for (int j = 0; j < kMaxSlots; ++j) {
        if (j >= p.top_k || s_pos[j] < 0) continue;
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
  for (int k = 0; k < kv; ++k) {
    for (int64_t i = threadIdx.x + int64_t{k} * rt; i < p.d; i += vt) {
      const float o = res[i] * inv * p.norm_weight[i];
      p.out[t * p.ldout + i] = o;
      if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
    }
  }
}

// The same row as CombineNormRowAnyBlock, bit for bit, with every load of the thread issued
// before its arithmetic and stores: the entries (virtual thread k, element m) of the thread,
// e = k * per + m, load their routed rows, base, residual and norm weight into registers first,
// then the same fp32 operations run in the same order (per virtual thread: elements in
// ascending i, then its warp butterfly; then the norm). The loop form waits one L2 round trip
// per element and pass (with 256 threads and d = 2048: 8 elements x 2 passes, ~20 us in the
// last block of o_proj, session 10 ncu); this form waits about three (two batches of 4 loads,
// then the norm weights; five with batches of 2). Returns false (nothing
// done, uniformly across the block) when the row does not fit the registers: more than
// kStagedEntries entries per thread, more than kStagedSlots routed slots, or shared groups.
inline constexpr int kStagedEntries = 8;
inline constexpr int kStagedSlots = 8;
// kStagedBatch: entries loaded together (4; 2 where the caller's registers are capped).
template <typename T, int kStagedBatch>
__device__ __forceinline__ bool CombineNormRowStaged(const MoeCombineNormParams& p, int64_t t, float* red,
                                                     int32_t* s_pos, float* s_w) {
  const int rt = blockDim.x, vt = norm::RmsNormThreads(p.d), kv = vt / rt;
  const int per = static_cast<int>((p.d + vt - 1) / vt);  // elements per virtual thread (at most)
  if (kv * per > kStagedEntries || p.top_k > kStagedSlots || p.num_shared > 0) return false;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T* y = static_cast<const T*>(p.y);
  float* res = p.residual ? p.residual + t * p.ldres : nullptr;
  __syncthreads();  // red, s_pos and s_w may still be read for the previous row
  if (threadIdx.x < p.top_k) {
    s_pos[threadIdx.x] = __ldcg(p.pos + t * p.top_k + threadIdx.x);
    s_w[threadIdx.x] = __ldcg(p.weights + t * p.top_k + threadIdx.x);
  }
  __syncthreads();
  int32_t pos[kStagedSlots];
#pragma unroll
  for (int j = 0; j < kStagedSlots; ++j) pos[j] = j < p.top_k ? s_pos[j] : -1;
  // Entries in ascending e are virtual thread k's elements in ascending i, k ascending; the
  // last element of each k closes its sum of squares (the warp butterfly). Batches of
  // kStagedBatch entries: each loads all of its routed rows, bases and residuals, then
  // computes (the register arrays are indexed at compile time: unrolled e).
  float vv[kStagedEntries];
  float ss = 0.f;
#pragma unroll
  for (int b0 = 0; b0 < kStagedEntries; b0 += kStagedBatch) {
    float yv[kStagedBatch][kStagedSlots], bv[kStagedBatch], rv[kStagedBatch];
#pragma unroll
    for (int eb = 0; eb < kStagedBatch; ++eb) {
      const int e = b0 + eb, k = e / per, m = e % per;
      const int64_t i = threadIdx.x + int64_t{k} * rt + int64_t{m} * vt;
      const bool ok = k < kv && i < p.d;
#pragma unroll
      for (int j = 0; j < kStagedSlots; ++j)
        yv[eb][j] = ok && pos[j] >= 0 ? dev::ToF(__ldcg(y + static_cast<int64_t>(pos[j]) * p.ldy + i)) : 0.f;
      bv[eb] = ok && p.base ? __ldcg(p.base + t * p.ld_base + i) : 0.f;
      rv[eb] = ok && res ? __ldcg(res + i) : 0.f;
    }
#pragma unroll
    for (int eb = 0; eb < kStagedBatch; ++eb) {
      const int e = b0 + eb, k = e / per, m = e % per;
      vv[e] = 0.f;
      if (k >= kv) continue;  // uniform across the block
      const int64_t i = threadIdx.x + int64_t{k} * rt + int64_t{m} * vt;
      if (i < p.d) {
        float acc = bv[eb];
#pragma unroll
        for (int j = 0; j < kStagedSlots; ++j) {
          if (j >= p.top_k || pos[j] < 0) continue;
          float v = yv[eb][j];
          if (p.round_y_bf16) v = __bfloat162float(__float2bfloat16_rn(v));
          acc += s_w[j] * v;
        }
        if (p.moe_out) p.moe_out[t * p.ld_moe_out + i] = acc;
        if (res) {
          float v = acc;
          v += rv[eb];
          res[i] = v;
          vv[e] = v;
          ss += v * v;
        }
      }
      if (m == per - 1) {  // uniform: virtual thread k's elements are done
        const float wsum = dev::WarpSum(ss);
        if (lane == 0) red[warp + (rt >> 5) * k] = wsum;
        ss = 0.f;
      }
    }
  }
  if (!res) return true;
  __syncthreads();
  const float total = dev::WarpSum(lane < (vt >> 5) ? red[lane] : 0.f);
  const float inv = rsqrtf(total / static_cast<float>(p.d) + p.eps);
#pragma unroll
  for (int e = 0; e < kStagedEntries; ++e) {
    const int k = e / per, m = e % per;
    const int64_t i = threadIdx.x + int64_t{k} * rt + int64_t{m} * vt;
    if (k >= kv || i >= p.d) continue;
    const float o = vv[e] * inv * __ldg(p.norm_weight + i);
    p.out[t * p.ldout + i] = o;
    if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
  }
  return true;
}

}  // namespace ds::cuda::combine
