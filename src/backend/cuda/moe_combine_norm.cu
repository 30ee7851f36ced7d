#include "backend/cuda/moe_combine_norm.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rmsnorm.cuh"

namespace ds::cuda {
namespace {

// The staged forms (PE > 0: rows of at most PE elements per thread; decode rows are one block
// each and latency-bound) hold a thread's PE elements in registers and up to kStagedTopK routed
// slots per token in shared memory, and issue every load of one accumulation step before its
// adds: the base, shared rows and residual up front, then the routed rows kSlotLoads / PE slots
// at a time (a V2-Lite token's 6 slots of 2 elements per thread in one round trip, where the
// loop form chains a pos -> row load pair per slot and element). PE = 0 is the loop form (wider
// rows, or more slots). All forms run the same fp32 operations in the same order per element
// (header), so they give the same bits.
constexpr int kStagedTopK = 16;
constexpr int kSlotLoads = 16;  // routed-row loads in flight per thread (rows of <= 4 per thread)
constexpr int kMaxThreads = 1024;  // RmsNormThreads' largest block: at most 64 registers a thread

// The loop form (rows of more than 8 elements per thread, or more than kStagedTopK slots).
template <typename T>
__device__ __forceinline__ void MoeCombineNormLoop(const MoeCombineNormParams& p, int64_t t, const T* y,
                                                   const float* fy, float* res, float* red) {
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) {
    // MoeCombine (moe_permute.cu CombineKernel), with the shared groups first.
    float acc = p.base ? p.base[t * p.ld_base + i] : 0.f;
    for (int s = 0; s < p.num_shared; ++s) acc += fy[(p.shared_row0 + s * p.n + t) * p.ldy + i];
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int32_t r = p.pos[t * p.top_k + j];
      if (r < 0) continue;
      float yv = dev::ToF(y[static_cast<int64_t>(r) * p.ldy + i]);
      if (p.round_y_bf16) yv = __bfloat162float(__float2bfloat16_rn(yv));
      acc += p.weights[t * p.top_k + j] * yv;
    }
    if (p.moe_out) p.moe_out[t * p.ld_moe_out + i] = acc;
    // RmsNorm (rmsnorm.cu) with x = acc and the residual.
    if (res) {
      float v = acc;
      v += res[i];
      res[i] = v;
      ss += v * v;
    }
  }
  if (!res) return;
  const float total = dev::BlockSum(ss, red);
  const float inv = rsqrtf(total / static_cast<float>(p.d) + p.eps);
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) {
    const float o = res[i] * inv * p.norm_weight[i];
    p.out[t * p.ldout + i] = o;
    if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
  }
}

template <typename T, int PE>
__global__ void __launch_bounds__(kMaxThreads) MoeCombineNormKernel(MoeCombineNormParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  __shared__ float red[32];
  __shared__ int32_t s_pos[kStagedTopK];
  __shared__ float s_w[kStagedTopK];
  const int64_t t = blockIdx.x;
  const T* y = static_cast<const T*>(p.y);
  const float* fy = static_cast<const float*>(p.y);
  float* res = p.residual ? p.residual + t * p.ldres : nullptr;
  float ss = 0.f;
  const int64_t bd = blockDim.x;
  if constexpr (PE > 0) {
    // Slots per batch of loads: rows of 8 per thread (V3) keep one slot per batch (16 loads in
    // flight do not fit 64 registers beside the accumulators); at most 8 slots a batch.
    constexpr int kSc = PE >= 8 ? 1 : (kSlotLoads / PE < 8 ? kSlotLoads / PE : 8);
    if (threadIdx.x < p.top_k) {
      s_pos[threadIdx.x] = p.pos[t * p.top_k + threadIdx.x];
      s_w[threadIdx.x] = p.weights[t * p.top_k + threadIdx.x];
    }
    float acc[PE], rv[PE];
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      acc[e] = p.base && i < p.d ? p.base[t * p.ld_base + i] : 0.f;
      rv[e] = res && i < p.d ? res[i] : 0.f;
    }
    __syncthreads();
    for (int s = 0; s < p.num_shared; ++s) {
      const float* row = fy + (p.shared_row0 + s * p.n + t) * p.ldy;
#pragma unroll
      for (int e = 0; e < PE; ++e) {
        const int64_t i = threadIdx.x + e * bd;
        if (i < p.d) acc[e] += row[i];
      }
    }
    for (int64_t j0 = 0; j0 < p.top_k; j0 += kSc) {
      float yv[kSc][PE];
#pragma unroll
      for (int jj = 0; jj < kSc; ++jj) {
        const int64_t j = j0 + jj;
        const int32_t r = j < p.top_k ? s_pos[j] : -1;
        const T* row = y + static_cast<int64_t>(r < 0 ? 0 : r) * p.ldy;
#pragma unroll
        for (int e = 0; e < PE; ++e) {
          const int64_t i = threadIdx.x + e * bd;
          yv[jj][e] = r >= 0 && i < p.d ? dev::ToF(row[i]) : 0.f;
        }
      }
#pragma unroll
      for (int jj = 0; jj < kSc; ++jj) {
        const int64_t j = j0 + jj;
        if (j >= p.top_k || s_pos[j] < 0) continue;
        const float w = s_w[j];
#pragma unroll
        for (int e = 0; e < PE; ++e) {
          float v = yv[jj][e];
          if (p.round_y_bf16) v = __bfloat162float(__float2bfloat16_rn(v));
          acc[e] += w * v;
        }
      }
    }
    if (p.moe_out) {
#pragma unroll
      for (int e = 0; e < PE; ++e) {
        const int64_t i = threadIdx.x + e * bd;
        if (i < p.d) p.moe_out[t * p.ld_moe_out + i] = acc[e];
      }
    }
    if (!res) return;
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      if (i < p.d) {
        const float v = acc[e] + rv[e];
        res[i] = v;
        acc[e] = v;
        ss += v * v;
      }
    }
    const float total = dev::BlockSum(ss, red);
    const float inv = rsqrtf(total / static_cast<float>(p.d) + p.eps);
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      if (i < p.d) {
        const float o = acc[e] * inv * p.norm_weight[i];
        p.out[t * p.ldout + i] = o;
        if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
      }
    }
    return;
  } else {
    MoeCombineNormLoop<T>(p, t, y, fy, res, red);
  }
}

template <typename T>
void Launch(int pe, int threads, const MoeCombineNormParams& p) {
  switch (pe) {
    case 1: LaunchKernel(MoeCombineNormKernel<T, 1>, p.n, threads, 0, p.stream, p.pdl, p); break;
    case 2: LaunchKernel(MoeCombineNormKernel<T, 2>, p.n, threads, 0, p.stream, p.pdl, p); break;
    case 4: LaunchKernel(MoeCombineNormKernel<T, 4>, p.n, threads, 0, p.stream, p.pdl, p); break;
    case 8: LaunchKernel(MoeCombineNormKernel<T, 8>, p.n, threads, 0, p.stream, p.pdl, p); break;
    default: LaunchKernel(MoeCombineNormKernel<T, 0>, p.n, threads, 0, p.stream, p.pdl, p); break;
  }
}

}  // namespace

void MoeCombineNorm(const MoeCombineNormParams& p) {
  DS_CHECK(p.n >= 0 && p.d > 0 && p.top_k >= 0) << "MoeCombineNorm: bad shape n=" << p.n << " d=" << p.d;
  DS_CHECK(p.num_shared == 0 || !p.y_bf16) << "MoeCombineNorm: fused shared groups need fp32 y";
  DS_CHECK(!p.round_y_bf16 || !p.y_bf16) << "MoeCombineNorm: round_y_bf16 is for fp32 y";
  DS_CHECK(p.residual || p.moe_out) << "MoeCombineNorm: no output";
  DS_CHECK(!p.residual || (p.norm_weight && p.out)) << "MoeCombineNorm: the norm needs its weight and output";
  if (p.n == 0) return;
  const int threads = norm::RmsNormThreads(p.d);  // RmsNorm's block size (same reduction order)
  const int64_t per_thread = (p.d + threads - 1) / threads;
  const int pe = p.top_k > kStagedTopK ? 0 : per_thread <= 1 ? 1 : per_thread <= 2 ? 2 : per_thread <= 4 ? 4
                                                                   : per_thread <= 8 ? 8 : 0;
  if (p.y_bf16) Launch<__nv_bfloat16>(pe, threads, p);
  else Launch<float>(pe, threads, p);
  DS_CUDA_CHECK_LAUNCH("MoeCombineNormKernel");
}

}  // namespace ds::cuda
