#include "backend/cuda/silu_and_mul.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace ds::cuda {
namespace {

// One warp per (token, 128-channel group).
template <typename TOut>
__global__ void SiluAndMulKernel(SiluAndMulParams p, int64_t groups) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5);
  if (item >= p.n * groups) return;
  const int64_t t = item / groups, g = item % groups;
  const float* gu = p.gate_up + t * p.ld_in;
  float v[4], ga[4], up[4];
  float amax = 0.f;
  // All eight loads first, then the math and the stores (a load-store loop made the four
  // positions a chain of dependent round trips); the same values.
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = g * 128 + lane + 32 * j;
    ga[j] = i < p.inter ? gu[i] : 0.f;
    up[j] = i < p.inter ? gu[p.inter + i] : 0.f;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = g * 128 + lane + 32 * j;
    v[j] = 0.f;
    if (i < p.inter) {
      const float a = ga[j], b = up[j];
      v[j] = a / (1.0f + expf(-a)) * b;
      amax = fmaxf(amax, fabsf(v[j]));
      if (p.out) static_cast<TOut*>(p.out)[t * p.ld_out + i] = dev::FromF<TOut>(v[j]);
    }
  }
  if (!p.q) return;
  amax = fmaxf(dev::WarpMax(amax), 1e-10f);
  const float scale = amax / 448.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = g * 128 + lane + 32 * j;
    if (i < p.inter) p.q[t * p.ldq + i] = dev::F32ToE4M3(v[j] / scale);
  }
  if (lane == 0) {
    if (p.scale_layout == ScaleLayout::kTokenMajor) p.scales[t * groups + g] = scale;
    else p.scales[g * (p.scale_ld > 0 ? p.scale_ld : p.n) + t] = scale;
  }
}

}  // namespace

void SiluAndMul(const SiluAndMulParams& p) {
  DS_CHECK(p.n >= 0 && p.inter > 0) << "SiluAndMul: bad shape";
  DS_CHECK(p.out || p.q) << "SiluAndMul: no output";
  if (p.n == 0) return;
  const int64_t groups = (p.inter + 127) / 128;
  const int warps = 8;
  const int blocks = dev::CeilDiv(p.n * groups, warps);
  if (p.out_type == DTypeOut::kF32) LaunchKernel(SiluAndMulKernel<float>, blocks, warps * 32, 0, p.stream, p.pdl, p, groups);
  else LaunchKernel(SiluAndMulKernel<__nv_bfloat16>, blocks, warps * 32, 0, p.stream, p.pdl, p, groups);
  DS_CUDA_CHECK_LAUNCH("SiluAndMulKernel");
}

}  // namespace ds::cuda
