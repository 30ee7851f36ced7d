#include "backend/cuda/moe_combine_norm.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rmsnorm.cuh"

namespace ds::cuda {
namespace {

// The staged form (rmsnorm.cuh's rule: rows of 5-8 elements per thread, V3 / Kimi's
// 7168 over 1024 threads; at <= 4 per thread it measured slower) holds norm::kStagedPerThread
// elements per thread in registers and up to kStagedTopK routed slots per token in shared
// memory; other rows take the loop form. Both run the same fp32 operations in the same order
// per element (header), so they give the same bits.
constexpr int kStagedTopK = 16;

template <typename T>
__global__ void MoeCombineNormKernel(MoeCombineNormParams p) {
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
  if (p.d > (norm::kStagedMinPerThread - 1) * bd && p.d <= norm::kStagedPerThread * bd && p.top_k <= kStagedTopK) {
    // Staged form (decode: one row per block is latency-bound): the token's slots and weights
    // read once into shared memory, then every load of one accumulation step issued before
    // its adds (no store in between), so the row's loads overlap instead of forming a chain
    // of dependent round trips per element.
    if (threadIdx.x < p.top_k) {
      s_pos[threadIdx.x] = p.pos[t * p.top_k + threadIdx.x];
      s_w[threadIdx.x] = p.weights[t * p.top_k + threadIdx.x];
    }
    __syncthreads();
    float acc[norm::kStagedPerThread];
#pragma unroll
    for (int e = 0; e < norm::kStagedPerThread; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      acc[e] = p.base && i < p.d ? p.base[t * p.ld_base + i] : 0.f;
    }
    for (int s = 0; s < p.num_shared; ++s) {
      const float* row = fy + (p.shared_row0 + s * p.n + t) * p.ldy;
#pragma unroll
      for (int e = 0; e < norm::kStagedPerThread; ++e) {
        const int64_t i = threadIdx.x + e * bd;
        if (i < p.d) acc[e] += row[i];
      }
    }
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int32_t r = s_pos[j];
      if (r < 0) continue;
      const float w = s_w[j];
      const T* row = y + static_cast<int64_t>(r) * p.ldy;
      float yv[norm::kStagedPerThread];
#pragma unroll
      for (int e = 0; e < norm::kStagedPerThread; ++e) {
        const int64_t i = threadIdx.x + e * bd;
        yv[e] = i < p.d ? dev::ToF(row[i]) : 0.f;
      }
#pragma unroll
      for (int e = 0; e < norm::kStagedPerThread; ++e) {
        float v = yv[e];
        if (p.round_y_bf16) v = __bfloat162float(__float2bfloat16_rn(v));
        acc[e] += w * v;
      }
    }
    if (p.moe_out) {
#pragma unroll
      for (int e = 0; e < norm::kStagedPerThread; ++e) {
        const int64_t i = threadIdx.x + e * bd;
        if (i < p.d) p.moe_out[t * p.ld_moe_out + i] = acc[e];
      }
    }
    if (!res) return;
    float rv[norm::kStagedPerThread];
#pragma unroll
    for (int e = 0; e < norm::kStagedPerThread; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      rv[e] = i < p.d ? res[i] : 0.f;
    }
#pragma unroll
    for (int e = 0; e < norm::kStagedPerThread; ++e) {
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
    for (int e = 0; e < norm::kStagedPerThread; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      if (i < p.d) {
        const float o = acc[e] * inv * p.norm_weight[i];
        p.out[t * p.ldout + i] = o;
        if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
      }
    }
    return;
  }
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

}  // namespace

void MoeCombineNorm(const MoeCombineNormParams& p) {
  DS_CHECK(p.n >= 0 && p.d > 0 && p.top_k >= 0) << "MoeCombineNorm: bad shape n=" << p.n << " d=" << p.d;
  DS_CHECK(p.num_shared == 0 || !p.y_bf16) << "MoeCombineNorm: fused shared groups need fp32 y";
  DS_CHECK(!p.round_y_bf16 || !p.y_bf16) << "MoeCombineNorm: round_y_bf16 is for fp32 y";
  DS_CHECK(p.residual || p.moe_out) << "MoeCombineNorm: no output";
  DS_CHECK(!p.residual || (p.norm_weight && p.out)) << "MoeCombineNorm: the norm needs its weight and output";
  if (p.n == 0) return;
  const int threads = norm::RmsNormThreads(p.d);  // RmsNorm's block size (same reduction order)
  if (p.y_bf16) LaunchKernel(MoeCombineNormKernel<__nv_bfloat16>, p.n, threads, 0, p.stream, p.pdl, p);
  else LaunchKernel(MoeCombineNormKernel<float>, p.n, threads, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("MoeCombineNormKernel");
}

}  // namespace ds::cuda
