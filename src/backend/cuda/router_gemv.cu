#include "backend/cuda/router_gemv.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/router_gemv.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

// Block n: column n of y for every row (router_gemv.cuh).
__global__ void __launch_bounds__(router::kThreads) RouterGemvKernel(RouterGemvParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  router::GemvColumn(p, blockIdx.x);
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
  LaunchKernel(RouterGemvKernel, dim3(static_cast<unsigned>(p.N)), dim3(router::kThreads), 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("RouterGemvKernel");
}

}  // namespace ds::cuda
