#include "backend/cuda/router_gemv.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// Block n: column n of y for every row. Thread t takes the float4 steps t, t + 256, ... of K;
// the weights of a step are loaded once (4 steps in flight per thread), then each row's x.
__global__ void __launch_bounds__(kThreads) RouterGemvKernel(RouterGemvParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  __shared__ float part[kWarps][kRouterGemvMaxRows];
  const int64_t n = blockIdx.x;
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

}  // namespace

void RouterGemv(const RouterGemvParams& p) {
  DS_CHECK(p.M >= 1 && p.M <= kRouterGemvMaxRows) << "RouterGemv: M " << p.M << " outside 1.." << kRouterGemvMaxRows;
  DS_CHECK(p.N >= 1 && p.K >= 4 && p.K % 4 == 0) << "RouterGemv: bad shape N=" << p.N << " K=" << p.K
                                                  << " (K a positive multiple of 4)";
  DS_CHECK(p.ldx >= p.K && p.ldw >= p.K && p.ldy >= p.N && p.ldx % 4 == 0 && p.ldw % 4 == 0)
      << "RouterGemv: leading dimensions (ldx " << p.ldx << ", ldw " << p.ldw << " multiples of 4 and >= K; ldy "
      << p.ldy << " >= N)";
  DS_CHECK(p.x && p.w && p.y) << "RouterGemv: null pointer";
  DS_CHECK(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0)
      << "RouterGemv: x and w must be 16-byte aligned";
  DS_CHECK(p.N < (int64_t{1} << 31)) << "RouterGemv: N too large";
  LaunchKernel(RouterGemvKernel, dim3(static_cast<unsigned>(p.N)), dim3(kThreads), 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("RouterGemvKernel");
}

}  // namespace ds::cuda
