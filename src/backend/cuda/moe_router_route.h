// MoE router + routing + permutation metadata in one launch, for decode-size batches whose
// routed-expert GEMM gathers its activation rows by index (GroupedGemmParams::a_rows, SkinnyGemm):
// the chain RouterGemv -> MoeRoutePermute (two launches, the second with copy blocks that spin
// on its routing blocks' flag; ~13 us per layer on V2-Lite at batch 1, session 8) becomes one
// kernel with no row copies.
//
// Computes exactly what RouterGemv (router_gemv.h) followed by MoeRoutePermute
// (moe_route_permute.h, warp routing form, no shared groups) compute, except the permuted rows:
//   - logits [n, E] fp32 (gemv.y): RouterGemv's device routine (router_gemv.cuh), bit-identical;
//   - topk_ids / topk_weights [n, top_k] (routing.topk_*): the warp routing form's device
//     routine (moe_routing.cuh, RouteTokenInWarp), bit-identical to MoeRouting with warp_route;
//   - offsets [E + 1], pos [n * top_k], src_row [n * top_k]: as MoeRoutePermute with row_align 1
//     (pairs of an expert in pair order t * top_k + j), so src_row[r] is the token row that
//     permuted row r would hold: the expert GEMM reads x + src_row[r] * ldx instead of a copy.
//
// Launch: E blocks of 256 threads. Block e computes logits column e; each block then counts
// itself out on a device counter (`sync`, one uint32, zero before the first launch) after a
// __threadfence, and the last one (the CUDA threadFenceReduction pattern: no block waits on
// another, so residency does not matter) routes token t on warp t % min(n, 8) (logits read
// through L2), writes the metadata and resets the counter: graph-capturable and replayable, no
// host synchronisation, no allocation. Shared memory per block: the routing warps' scratch and
// the ids, min(n, 8) x (2E + 112) + n x top_k words (2.5 KB for V3 at one token), dynamic.
//
// Limits: 1 <= n <= kRouterGemvMaxRows (16), E <= 256 (the warp form), top_k <= 32, n * top_k <=
// 512, RouterGemv's shape rules (K % 4 == 0, aligned x / w) and MoeRouting's group rules.
// Errors: DS_CHECK (MoeRouterRouteSupported says in advance whether a shape is taken).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe_routing.h"
#include "backend/cuda/router_gemv.h"

namespace ds::cuda {

inline constexpr int64_t kMoeRouterRouteMaxExperts = 256;
inline constexpr int64_t kMoeRouterRouteMaxPairs = 512;

struct MoeRouterRouteParams {
  RouterGemvParams gemv;     // x [n, K] fp32 (the normed hidden states), w = router [E, K], y = logits [n, E]
  MoeRoutingParams routing;  // n, E, method; `logits` ignored (gemv.y is used); writes topk_ids / topk_weights
  int32_t* offsets = nullptr;  // [E + 1]
  int32_t* pos = nullptr;      // [n * top_k]
  int32_t* src_row = nullptr;  // [n * top_k]
  uint32_t* sync = nullptr;    // one counter, zero before the first launch (left zero)
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch (launch.cuh); same results either way
  // One token (n == 1, E <= 256, groups of 32 experts or none) routed by one warp with its
  // intermediates in registers (session 30; the runner's default, CudaRunnerOptions::
  // router_route_fast): the same ids, weights and metadata as the warp form for non-NaN logits;
  // other passes (and V2's groups of 20) take the warp form (RouteTokenInWarp).
  bool fast_route = false;
  // Timing probes only (CudaMoeRouterRoute.DISABLED_TimingReport): 1 returns after the GEMV, 2
  // after the count (before the routing), 3 after the routing (before the metadata): the outputs
  // are then incomplete. 0 in every real launch.
  int debug_stop = 0;
  // Timing probe: the last block's thread 0 writes %globaltimer (ns) into [0..3] (tail start, after
  // the routing, after the ids' copy, end).
  long long* debug_stamps = nullptr;
};

// Whether a launch with fast_route set routes with the fast form (one token, E <= 256, no groups or
// groups of 32 experts); otherwise it takes the warp form.
bool MoeRouterRouteFastApplies(int64_t n, int64_t num_experts, int topk_method, int n_group);

// Whether MoeRouterRoute takes n tokens of E experts choosing top_k each (the sizes only).
bool MoeRouterRouteSupported(int64_t n, int64_t num_experts, int64_t top_k);

void MoeRouterRoute(const MoeRouterRouteParams& p);

}  // namespace ds::cuda
