#include "backend/cuda/moe_routing.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/cuda_check.h"

namespace ds::cuda {
namespace {

__global__ void MoeRoutingKernel(MoeRoutingParams p) { routing::RouteToken(p, blockIdx.x); }

}  // namespace

void MoeRouting(const MoeRoutingParams& p) {
  DS_CHECK(p.num_experts > 0 && p.num_experts <= routing::kMaxExperts) << "MoeRouting: num_experts " << p.num_experts;
  DS_CHECK(p.top_k > 0 && p.top_k <= 32 && p.top_k <= p.num_experts) << "MoeRouting: top_k " << p.top_k;
  DS_CHECK(p.n_group >= 1 && p.n_group <= 64 && p.num_experts % p.n_group == 0)
      << "MoeRouting: n_group " << p.n_group;
  DS_CHECK(p.topk_group >= 1 && p.topk_group <= p.n_group) << "MoeRouting: topk_group " << p.topk_group;
  if (p.n == 0) return;
  MoeRoutingKernel<<<p.n, routing::kMoeRoutingThreads, 0, p.stream>>>(p);
  DS_CUDA_CHECK_LAUNCH("MoeRoutingKernel");
}

}  // namespace ds::cuda
