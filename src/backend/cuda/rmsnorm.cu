#include "backend/cuda/rmsnorm.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rmsnorm.cuh"

namespace ds::cuda {
namespace {

template <typename TOut>
__global__ void RmsNormKernel(RmsNormParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t row = blockIdx.x;
  __nv_bfloat16* o16 = static_cast<__nv_bfloat16*>(p.out_bf16);
  if (o16) o16 += row * p.ld_out_bf16;
  norm::RmsNormRow<TOut>(p.x + row * p.ldx, p.residual ? p.residual + row * p.ldres : nullptr, p.weight,
                         static_cast<TOut*>(p.out) + row * p.ldout, o16, p.d, p.eps);
}

}  // namespace

void RmsNorm(const RmsNormParams& p) {
  DS_CHECK(p.n >= 0 && p.d > 0) << "RmsNorm: bad shape n=" << p.n << " d=" << p.d;
  DS_CHECK(!p.out_bf16 || p.out_type == DTypeOut::kF32) << "RmsNorm: out_bf16 needs an fp32 out";
  if (p.n == 0) return;
  const int threads = norm::RmsNormThreads(p.d);
  if (p.out_type == DTypeOut::kF32)
    LaunchKernel(RmsNormKernel<float>, p.n, threads, 0, p.stream, p.pdl, p);
  else
    LaunchKernel(RmsNormKernel<__nv_bfloat16>, p.n, threads, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("RmsNormKernel");
}

}  // namespace ds::cuda
