// Fused MoE routing + token permutation for decode-size batches (one launch instead of
// MoeRouting + MoePermute's memset and five kernels). Verified on the H200 (session 4): bit-identical
// to the unfused pair; the runner's default for passes of <= 16 tokens (CudaRunnerOptions::fused_moe_route).
//
// Computes exactly what MoeRouting (moe_routing.h) followed by MoePermute (moe_permute.h) with
// row_align 1 compute:
//   - topk_ids / topk_weights [n, top_k]: the same device routine as MoeRouting
//     (moe_routing.cuh, one 256-thread block per token: the same fp32 operations in the same
//     order, so bit-identical ids and weights);
//   - offsets [E + 1]: expert e owns permuted rows [offsets[e], offsets[e + 1]) (no padding);
//   - pos [n * top_k]: the permuted row of pair (t, j);
//   - src_row [n * top_k]: the token of each permuted row;
//   - xp [n * top_k, d] bf16: the permuted token rows.
// Inside a segment the rows are in pair order (t * top_k + j ascending): deterministic, one of
// the orders MoePermute's atomics may produce (results downstream do not depend on it).
//
// Shared experts as extra groups (num_shared_groups = S > 0; the fused shared-expert path of
// the runner): groups E .. E + S - 1 follow, each with all n tokens in order: offsets has
// E + S + 1 entries, offsets[E + s] = n * top_k + s * n, src_row and xp have n * top_k + S * n
// rows, row n * top_k + s * n + t = token t.
//
// Launch: one kernel of n routing blocks followed by n * top_k copy blocks (256 threads). The
// copy blocks wait (spinning on a device counter) until every routing block has published its
// ids, then place their pair and copy its row. This relies on the routing blocks (the lowest
// block indices) being resident or dispatched before the copy blocks, as single-pass scans
// (decoupled look-back) do; the grid is small (<= kMoeRoutePermuteMaxTokens * (1 + top_k)
// blocks), so on an otherwise idle stream all of it is resident at once. The counter (`sync`,
// one uint32) must be zero before the first launch; the last block to leave resets it, so the
// op is CUDA-graph-capturable and replayable (no host synchronisation, no allocation).
//
// Limits: n <= kMoeRoutePermuteMaxTokens, E <= 1024, top_k <= 32, n * top_k <= 1024, S <= 8, and
// MoeRouting's limits on groups. Errors: DS_CHECK.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe_routing.h"

namespace ds::cuda {

inline constexpr int64_t kMoeRoutePermuteMaxTokens = 16;

struct MoeRoutePermuteParams {
  MoeRoutingParams routing;                // logits [n, E], bias, method; outputs topk_ids / topk_weights
  const __nv_bfloat16* x; int64_t ldx;     // [n, d] token rows to permute
  int64_t d;
  int num_shared_groups = 0;               // S extra groups of all n tokens (see above)
  int32_t* offsets;                        // [E + S + 1]
  int32_t* pos;                            // [n * top_k]
  int32_t* src_row;                        // [n * top_k + S * n]
  __nv_bfloat16* xp;                       // [n * top_k + S * n, d]
  uint32_t* sync;                          // one counter, zero before the first launch (left zero)
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way.
  bool pdl = false;
};
void MoeRoutePermute(const MoeRoutePermuteParams& p);

}  // namespace ds::cuda
