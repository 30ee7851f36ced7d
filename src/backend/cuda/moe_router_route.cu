#include "backend/cuda/moe_router_route.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/router_gemv.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

constexpr int kThreads = router::kThreads, kWarps = router::kWarps;
static_assert(kThreads == routing::kMoeRoutingThreads, "one block size for both device routines");

// Warps that route (token t on warp t % RouteWarps(n)) and the dynamic shared memory: their
// scratch, then the n * top_k ids. Kept small: every block of the grid gets it, and the blocks
// must fit beside whatever the decode graph's side branch runs (a first form with 38.5 KB of
// static shared memory per block measured slower in the graph than the two launches it replaced,
// session 9 run 2).
__host__ __device__ inline int RouteWarps(int64_t n) { return static_cast<int>(n < kWarps ? n : kWarps); }
size_t SmemBytes(int64_t n, int64_t E, int64_t pairs) {
  return sizeof(float) * (RouteWarps(n) * routing::WarpRouteScratchWords(E) + pairs);
}

// One token (n == 1) routed by warp 0 with every intermediate in registers (MoeRouterRouteParams::
// fast_route, session 30), then its permutation metadata by the same warp. RouteTokenInWarp's
// operations on the same values, so the same ids and weights for non-NaN logits (the fp32 operations
// that produce scores, sums and weights are the same expressions in the same order):
//   - scores and sel as there (lane l holds experts l + 32 j);
//   - group scores (topk_method != 0, n_group > 1; only where a group is 32 experts, so group j is
//     each lane's j-th expert) by warp reductions of order-preserving keys instead of one lane's scan:
//     m1 the largest non-NaN sel of the group, m2 the next one with multiplicity (m1 again when two
//     lanes hold the largest), as the scan's (v > m1) / (v > m2) updates give;
//   - the greedy group choice on every lane from those registers (the same order and tie rule as
//     PickGroups: the lowest index among equal scores);
//   - top-k exactly as there; the chosen expert's score fetched from its lane by a shuffle, the
//     norm_topk_prob sum accumulated in chosen order, the weight as WriteTopk's expression;
//   - offsets / pos / src_row as the block's loops compute them (MoeRoutePermute's order), from the
//     ids in shared memory.
// RouteTokenInWarp (session 24) measured ~10 us for V3's router in this kernel, warm or cold (session
// 30 run 4: the scans of one lane and the shared-memory round trips of each step). The scoring lines
// repeat RouteTokenInWarp's on purpose: that routine is also the persistent MoE kernel's, whose
// generated code a shared helper could move (session 28's SASS checks).
constexpr int kFastPer = routing::kWarpRouteMaxExperts / 32;  // 8
__host__ __device__ __forceinline__ bool FastRouteAppliesTo(int64_t n, int64_t E, int topk_method, int n_group) {
  return n == 1 && E <= 32 * kFastPer && (topk_method == 0 || n_group <= 1 || (n_group * 32 == E && n_group <= kFastPer));
}
__device__ __forceinline__ bool FastRouteApplies(const MoeRouterRouteParams& p) {
  return FastRouteAppliesTo(p.gemv.M, p.gemv.N, p.routing.topk_method, p.routing.n_group);
}
__device__ __forceinline__ void FastRouteOneToken(const MoeRouterRouteParams& p, int* s_ids) {
  const MoeRoutingParams& rp = p.routing;
  const int lane = threadIdx.x & 31;
  const int E = static_cast<int>(p.gemv.N), K = rp.top_k;
  const float* lg = p.gemv.y;
  constexpr unsigned kAll = 0xffffffffu;
  float x[kFastPer], b[kFastPer];
#pragma unroll
  for (int j = 0; j < kFastPer; ++j) {
    const int e = lane + 32 * j;
    x[j] = e < E ? __ldcg(lg + e) : -INFINITY;
    b[j] = rp.bias != nullptr && e < E ? rp.bias[e] : 0.f;
  }
  if (rp.scoring == 0) {
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < kFastPer; ++j) m = fmaxf(m, x[j]);
    m = routing::FloatOfOrderedKey(__reduce_max_sync(kAll, routing::OrderedKey(m)));
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kFastPer; ++j) {
      x[j] = lane + 32 * j < E ? expf(x[j] - m) : 0.f;
      s += x[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kAll, s, o);
#pragma unroll
    for (int j = 0; j < kFastPer; ++j) x[j] /= s;
  } else {
#pragma unroll
    for (int j = 0; j < kFastPer; ++j) x[j] = 1.0f / (1.0f + expf(-x[j]));
  }
  float sel[kFastPer];
#pragma unroll
  for (int j = 0; j < kFastPer; ++j) sel[j] = lane + 32 * j < E ? x[j] + b[j] : -INFINITY;
  if (rp.topk_method != 0 && rp.n_group > 1) {  // FastRouteApplies: group g is j = g (32 experts)
    const int G = rp.n_group;
    float gs[kFastPer];
#pragma unroll
    for (int g = 0; g < kFastPer; ++g) {
      gs[g] = -INFINITY;
      if (g >= G) continue;
      const float v = sel[g];
      const unsigned key = v != v ? 0u : routing::OrderedKey(v);  // NaN: never a candidate
      const unsigned k1 = __reduce_max_sync(kAll, key);
      const float m1 = k1 == 0u ? -INFINITY : routing::FloatOfOrderedKey(k1);
      const int holders = __popc(__ballot_sync(kAll, k1 != 0u && key == k1));
      const unsigned k2 = __reduce_max_sync(kAll, key == k1 ? 0u : key);
      const float m2 = holders >= 2 ? m1 : k2 == 0u ? -INFINITY : routing::FloatOfOrderedKey(k2);
      gs[g] = rp.topk_method == 1 ? m1 : m1 + m2;
    }
    unsigned ok = 0;
    for (int r = 0; r < rp.topk_group; ++r) {
      int bg = -1;
      float bv = -INFINITY;
#pragma unroll
      for (int g = 0; g < kFastPer; ++g)
        if (g < G && !(ok >> g & 1u) && (bg < 0 || gs[g] > bv)) { bg = g; bv = gs[g]; }
      ok |= 1u << bg;
    }
#pragma unroll
    for (int j = 0; j < kFastPer; ++j)
      if (lane + 32 * j < E && !(ok >> j & 1u)) sel[j] = -INFINITY;
  }
  unsigned taken = 0;
  int my_id = 0;
  float my_score = 0.f, sum = 0.f;
  for (int r = 0; r < K; ++r) {
    float v = -INFINITY; int idx = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < kFastPer; ++j) {
      const int e = lane + 32 * j;
      if (e >= E || (taken >> j & 1u)) continue;
      if (idx == 0x7fffffff || sel[j] > v || (sel[j] == v && e < idx)) { v = sel[j]; idx = e; }
    }
    const unsigned key = routing::OrderedKey(v);
    const unsigned kmax = __reduce_max_sync(kAll, key);
    idx = static_cast<int>(__reduce_min_sync(kAll, key == kmax ? static_cast<unsigned>(idx) : 0xffffffffu));
    if (idx != 0x7fffffff && (idx & 31) == lane) taken |= 1u << (idx >> 5);
    // The chosen expert's score, from the lane that holds it (NaN for no candidate, as WriteTopk's).
    float own = 0.f;
#pragma unroll
    for (int j = 0; j < kFastPer; ++j)
      if (j == (idx >> 5)) own = x[j];
    float sc = __shfl_sync(kAll, own, idx & 31);
    if (!(idx < E)) sc = NAN;
    sum += sc;
    if (lane == r) { my_id = idx; my_score = sc; }
  }
  const float denom = rp.norm_topk_prob ? sum + 1e-20f : 1.0f;
  if (lane < K) {
    rp.topk_ids[lane] = my_id;
    rp.topk_weights[lane] = my_score / denom * rp.routed_scaling_factor;
    s_ids[lane] = my_id;
  }
  __syncwarp();
  // Pair i (token 0, slot i) goes to row (pairs of lower experts) + (pairs of its expert before it).
  if (lane < K) {
    const int e = my_id;
    int r = 0;
    for (int k = 0; k < K; ++k) r += s_ids[k] < e || (s_ids[k] == e && k < lane);
    p.pos[lane] = r;
    p.src_row[r] = 0;
  }
  for (int ee = lane; ee <= E; ee += 32) {
    int c = 0;
    for (int k = 0; k < K; ++k) c += s_ids[k] < ee;
    p.offsets[ee] = c;
  }
}

__global__ void __launch_bounds__(kThreads) MoeRouterRouteKernel(MoeRouterRouteParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  extern __shared__ float smem[];
  __shared__ bool s_last;
  const int tid = threadIdx.x, warp = tid >> 5;
  // logits column blockIdx.x for every token (bit-identical to RouterGemvKernel).
  router::GemvColumn(p.gemv, blockIdx.x);
  if (p.debug_stop == 1) return;
  // Count out; the last block of the grid goes on (every other block's logits are then in L2).
  // The barrier orders the block's stores (the threads < n wrote logits) before thread 0's
  // fence (cumulativity), which releases them with its count; the last block's thread 0 fences
  // again (acquire) before the barrier that lets the block read the other blocks' logits. (The
  // session-9 form, every thread fencing, measured the same: session 10 run 5; one acq_rel atomic
  // with the GEMV's loads all in flight, session 30 run 2, too.)
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    const uint32_t before = atomicAdd(p.sync, 1u);
    s_last = before == gridDim.x - 1;
    if (s_last) {
      __threadfence();
      *p.sync = 0u;  // every block has counted: reset for the next launch / replay
    }
  }
  __syncthreads();
  if (!s_last || p.debug_stop == 2) return;
  // Timing probe (debug_stamps): the last block's tail, thread 0's %globaltimer at its start, after
  // the routing, after the ids' copy and at the end.
  const auto stamp = [&](int i) {
    if (p.debug_stamps != nullptr && tid == 0) p.debug_stamps[i] = static_cast<long long>(dev::GlobalTimerNs());
  };
  stamp(0);
  const int64_t n = p.gemv.M, E = p.gemv.N, K = p.routing.top_k, m = n * K;
  const int warps = RouteWarps(n);
  if (p.fast_route && p.debug_stop == 0 && FastRouteApplies(p)) {
    if (warp == 0) FastRouteOneToken(p, reinterpret_cast<int*>(smem + routing::WarpRouteScratchWords(E)));
    if (p.debug_stamps != nullptr) {
      __syncthreads();
      stamp(1);
      stamp(2);
      stamp(3);
    }
    return;
  }
  // Route token t on warp t % warps (the warp form, logits read through L2).
  MoeRoutingParams rp = p.routing;
  rp.logits = p.gemv.y;
  if (warp < warps) {
    const routing::WarpRouteView ws = routing::WarpRouteScratchAt(smem + warp * routing::WarpRouteScratchWords(E), E);
    for (int64_t t = warp; t < n; t += warps) routing::RouteTokenInWarp(rp, t, ws);
  }
  __syncthreads();  // this block's topk_ids stores are visible to the block after the barrier
  stamp(1);
  if (p.debug_stop == 3) return;
  int* s_ids = reinterpret_cast<int*>(smem + warps * routing::WarpRouteScratchWords(E));
  for (int64_t k = tid; k < m; k += kThreads) s_ids[k] = rp.topk_ids[k];
  __syncthreads();
  stamp(2);
  // Pair i = (t, j) goes to row (pairs of lower experts) + (pairs of its expert before it),
  // MoeRoutePermute's order (row_align 1).
  for (int64_t i = tid; i < m; i += kThreads) {
    const int e = s_ids[i];
    int r = 0;
    for (int64_t k = 0; k < m; ++k) r += s_ids[k] < e || (s_ids[k] == e && k < i);
    p.pos[i] = r;
    p.src_row[r] = static_cast<int32_t>(i / K);
  }
  for (int64_t ee = tid; ee <= E; ee += kThreads) {
    int c = 0;
    for (int64_t k = 0; k < m; ++k) c += s_ids[k] < ee;
    p.offsets[ee] = c;
  }
  if (p.debug_stamps != nullptr) {
    __syncthreads();
    stamp(3);
  }
}

}  // namespace

bool MoeRouterRouteFastApplies(int64_t n, int64_t num_experts, int topk_method, int n_group) {
  return FastRouteAppliesTo(n, num_experts, topk_method, n_group);
}

bool MoeRouterRouteSupported(int64_t n, int64_t num_experts, int64_t top_k) {
  return n >= 1 && n <= kRouterGemvMaxRows && num_experts >= 1 && num_experts <= kMoeRouterRouteMaxExperts &&
         top_k >= 1 && top_k <= 32 && top_k <= num_experts && n * top_k <= kMoeRouterRouteMaxPairs;
}

void MoeRouterRoute(const MoeRouterRouteParams& p) {
  const RouterGemvParams& g = p.gemv;
  const MoeRoutingParams& rp = p.routing;
  DS_CHECK(MoeRouterRouteSupported(g.M, g.N, rp.top_k))
      << "MoeRouterRoute: " << g.M << " tokens x " << g.N << " experts, top_k " << rp.top_k << " (at most "
      << kRouterGemvMaxRows << " tokens, " << kMoeRouterRouteMaxExperts << " experts, " << kMoeRouterRouteMaxPairs
      << " pairs)";
  DS_CHECK(rp.n == g.M && rp.num_experts == g.N) << "MoeRouterRoute: routing n / E (" << rp.n << ", "
                                                 << rp.num_experts << ") differ from the GEMV's (" << g.M << ", "
                                                 << g.N << ")";
  DS_CHECK(rp.n_group >= 1 && rp.n_group <= 64 && rp.num_experts % rp.n_group == 0)
      << "MoeRouterRoute: n_group " << rp.n_group;
  DS_CHECK(rp.topk_group >= 1 && rp.topk_group <= rp.n_group) << "MoeRouterRoute: topk_group " << rp.topk_group;
  DS_CHECK(g.K >= 4 && g.K % 4 == 0 && g.ldx >= g.K && g.ldw >= g.K && g.ldy >= g.N && g.ldx % 4 == 0 &&
           g.ldw % 4 == 0)
      << "MoeRouterRoute: GEMV shape K=" << g.K << " ldx=" << g.ldx << " ldw=" << g.ldw << " ldy=" << g.ldy;
  DS_CHECK(g.M == 1 || g.ldy == g.N) << "MoeRouterRoute: the routing reads the logits of token t at t * E (ldy " << g.ldy
                                      << ", E " << g.N << ")";
  DS_CHECK(g.x && g.w && g.y && rp.topk_ids && rp.topk_weights && p.offsets && p.pos && p.src_row && p.sync)
      << "MoeRouterRoute: null pointer";
  DS_CHECK(reinterpret_cast<uintptr_t>(g.x) % 16 == 0 && reinterpret_cast<uintptr_t>(g.w) % 16 == 0)
      << "MoeRouterRoute: x and w must be 16-byte aligned";
  DS_CHECK(p.debug_stop >= 0 && p.debug_stop <= 3) << "MoeRouterRoute: debug_stop " << p.debug_stop;
  LaunchKernel(MoeRouterRouteKernel, dim3(static_cast<unsigned>(g.N)), dim3(kThreads), SmemBytes(g.M, g.N, g.M * rp.top_k),
               p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("MoeRouterRouteKernel");
}

}  // namespace ds::cuda
