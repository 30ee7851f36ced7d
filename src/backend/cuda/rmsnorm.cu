#include "backend/cuda/rmsnorm.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace ds::cuda {
namespace {

template <typename TOut>
__global__ void RmsNormKernel(RmsNormParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.ldx;
  float* res = p.residual ? p.residual + row * p.ldres : nullptr;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) {
    float v = x[i];
    if (res) { v += res[i]; res[i] = v; }
    ss += v * v;
  }
  const float total = dev::BlockSum(ss, red);
  const float inv = rsqrtf(total / static_cast<float>(p.d) + p.eps);
  TOut* out = static_cast<TOut*>(p.out) + row * p.ldout;
  const float* src = res ? res : x;
  __nv_bfloat16* o16 = static_cast<__nv_bfloat16*>(p.out_bf16);
  if (o16) o16 += row * p.ld_out_bf16;
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) {
    const float o = src[i] * inv * p.weight[i];
    out[i] = dev::FromF<TOut>(o);
    if (o16) o16[i] = __float2bfloat16_rn(o);
  }
}

}  // namespace

void RmsNorm(const RmsNormParams& p) {
  DS_CHECK(p.n >= 0 && p.d > 0) << "RmsNorm: bad shape n=" << p.n << " d=" << p.d;
  DS_CHECK(!p.out_bf16 || p.out_type == DTypeOut::kF32) << "RmsNorm: out_bf16 needs an fp32 out";
  if (p.n == 0) return;
  const int threads = p.d >= 1024 ? 1024 : 256;
  if (p.out_type == DTypeOut::kF32)
    LaunchKernel(RmsNormKernel<float>, p.n, threads, 0, p.stream, p.pdl, p);
  else
    LaunchKernel(RmsNormKernel<__nv_bfloat16>, p.n, threads, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("RmsNormKernel");
}

}  // namespace ds::cuda
