// Device side of the decode-size router GEMV (include only from .cu): one block computes column
// n of y = x @ w^T for every row, shared by RouterGemvKernel (router_gemv.cu) and the fused
// router + routing kernel (moe_router_route.cu), so that both run the same fp32 operations in
// the same order (bit-identical logits). The math is documented in router_gemv.h.
#pragma once

#include "backend/cuda/router_gemv.h"

namespace ds::cuda::router {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// Block n: column n of y for every row. Thread t takes the float4 steps t, t + 256, ... of K;
// the weights of a step are loaded once (4 steps in flight per thread), then each row's x.
// Every thread of the block (kThreads) must call it; ends after thread m < M wrote y[m, n].
__device__ __forceinline__ void GemvColumn(const RouterGemvParams& p, int64_t n) {
  __shared__ float part[kWarps][kRouterGemvMaxRows];
  const int M = static_cast<int>(p.M);
  const int64_t k4 = p.K / 4;
  const float4* w4 = reinterpret_cast<const float4*>(p.w + n * p.ldw);
  float acc[kRouterGemvMaxRows];
#pragma unroll
  for (int m = 0; m < kRouterGemvMaxRows; ++m) acc[m] = 0.f;
  constexpr int kUnroll = 4;
  for (int64_t base = threadIdx.x; base < k4; base += int64_t{kThreads} * kUnroll) {
    float4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t{u} * kThreads;
      wv[u] = i < k4 ? __ldg(w4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int m = 0; m < kRouterGemvMaxRows; ++m) {
      if (m >= M) break;
      const float4* x4 = reinterpret_cast<const float4*>(p.x + m * p.ldx);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + int64_t{u} * kThreads;
        if (i < k4) {
          const float4 xv = __ldg(x4 + i);
          acc[m] = fmaf(xv.x, wv[u].x, acc[m]);
          acc[m] = fmaf(xv.y, wv[u].y, acc[m]);
          acc[m] = fmaf(xv.z, wv[u].z, acc[m]);
          acc[m] = fmaf(xv.w, wv[u].w, acc[m]);
        }
      }
    }
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < kRouterGemvMaxRows; ++m) {
    if (m >= M) break;
    float v = acc[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) part[warp][m] = v;
  }
  __syncthreads();
  if (threadIdx.x < M) {
    float s = 0.f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) s += part[wi][threadIdx.x];
    p.y[threadIdx.x * p.ldy + n] = s;
  }
}

}  // namespace ds::cuda::router
