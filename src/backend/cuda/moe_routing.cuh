// Device side of MoE routing (include only from .cu): the routing of one token by one block of
// kMoeRoutingThreads threads, shared by MoeRoutingKernel (moe_routing.cu) and the fused decode
// routing + permutation (moe_route_permute.cu), so that both run the same fp32 operations in the
// same order (bit-identical ids and weights). The math is documented in moe_routing.h.
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_routing.h"

namespace ds::cuda::routing {

// Block size the routing is written for (the softmax sum and argmax reductions run over its
// threads: another block size would sum in another order).
constexpr int kMoeRoutingThreads = 256;
constexpr int kMaxExperts = 1024;

// Block-wide argmax over (value, index) with ties to the lower index.
__device__ inline void BlockArgMax(float v, int idx, float* sv, int* si, float* out_v, int* out_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
  }
  __syncthreads();
  if (lane == 0) { sv[warp] = v; si[warp] = idx; }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bv = sv[0]; int bi = si[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w)
      if (sv[w] > bv || (sv[w] == bv && si[w] < bi)) { bv = sv[w]; bi = si[w]; }
    *out_v = bv; *out_i = bi;
  }
  __syncthreads();
}

// A float's order-preserving unsigned key (a < b iff key(a) < key(b) for non-NaN floats; -0 is
// mapped to +0's key, as they compare equal), and back.
__device__ __forceinline__ unsigned OrderedKey(float v) {
  const unsigned u = __float_as_uint(v + 0.0f);  // -0 + +0 = +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float FloatOfOrderedKey(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Shared by both forms below, so that they run the same operations in the same order.
// Group g's score over its gs experts of sel, scanned in expert order: its max
// (group_limited_greedy, or groups of one expert), else the sum of its top two (noaux_tc).
__device__ __forceinline__ float GroupScore(const MoeRoutingParams& p, const float* sel, int g, int gs) {
  float m1 = -INFINITY, m2 = -INFINITY;
  for (int e = g * gs; e < (g + 1) * gs; ++e) {
    const float v = sel[e];
    if (v > m1) { m2 = m1; m1 = v; } else if (v > m2) { m2 = v; }
  }
  return (p.topk_method == 1 || gs < 2) ? m1 : m1 + m2;
}
// The topk_group best groups, greedily (one thread): group_ok[g] set for them (all cleared first
// by the caller).
__device__ __forceinline__ void PickGroups(const MoeRoutingParams& p, const float* group_score, bool* group_ok) {
  for (int r = 0; r < p.topk_group; ++r) {
    int bg = -1; float bv = -INFINITY;
    for (int g = 0; g < p.n_group; ++g)
      if (!group_ok[g] && (bg < 0 || group_score[g] > bv)) { bg = g; bv = group_score[g]; }
    group_ok[bg] = true;
  }
}
// Row t of topk_ids / topk_weights from the chosen experts (one thread): the unbiased scores,
// over their sum (+ 1e-20) when norm_topk_prob, times routed_scaling_factor.
// (The scores are read twice from shared memory rather than kept in a local array: a dynamically
// indexed array lives in local memory, the persistent MoE kernel's only stack frame until session
// 24. Used by the block form; the warp form writes the entries on its lanes.)
// An id out of range (the block argmax finds no candidate when every score left is NaN) reads no
// score: its weight is NaN.
__device__ __forceinline__ void WriteTopk(const MoeRoutingParams& p, int64_t t, const float* scores, const int* chosen) {
  const auto score = [&](int e) { return e >= 0 && e < p.num_experts ? scores[e] : NAN; };
  float sum = 0.f;
  for (int r = 0; r < p.top_k; ++r) sum += score(chosen[r]);
  const float denom = p.norm_topk_prob ? sum + 1e-20f : 1.0f;
  for (int r = 0; r < p.top_k; ++r) {
    const int e = chosen[r];
    p.topk_ids[t * p.top_k + r] = e;
    p.topk_weights[t * p.top_k + r] = score(e) / denom * p.routed_scaling_factor;
  }
}

// The warp form of RouteToken (MoeRoutingParams::warp_route, num_experts <= kWarpRouteMaxExperts):
// one warp routes token t; lane l holds experts l + 32 j, j < kPer (8, or 2 where E <= 64: the
// persistent MoE kernel). The same selection rules as the block form in the same order where it
// matters: the max of the logits (exact; one warp reduction of order-preserving keys), the scores
// (softmax: exp(l - max) / sum, the sum per lane in j order then a butterfly; sigmoid: the block
// form's expression), the group scores (each group scanned in expert order by one lane), the
// greedy group choice (lane 0, as the block form's thread 0), top-k by repeated argmax with ties
// to the lower expert (per lane over its experts, then two warp reductions: the largest key, the
// lowest index holding it), and the weights (WriteTopk's operations; the entries on lanes r <
// top_k, the norm_topk_prob sum in chosen order). Writes p.topk_ids / p.topk_weights row t.
// (Session 24: with 8 a lane, shuffle butterflies and lane 0's weights this took ~5.5 us of warp 0
// in the persistent MoE kernel under its DRAM load, every other warp of the block waiting; ~2 us now.)
constexpr int kWarpRouteMaxExperts = 256;
// One warp's shared-memory scratch: scores and sel [E], group_score [64], group_ok [64], chosen
// [32] (2.4 KB at E = 256). WarpRouteScratch holds it for E <= 256; a kernel sizing its dynamic
// shared memory by E lays it out with WarpRouteScratchFloats / WarpRouteScratchAt.
struct WarpRouteView {
  float* scores;
  float* sel;
  float* group_score;
  bool* group_ok;
  int* chosen;
};
struct WarpRouteScratch {
  float scores[kWarpRouteMaxExperts];
  float sel[kWarpRouteMaxExperts];
  float group_score[64];
  bool group_ok[64];
  int chosen[32];
  __device__ WarpRouteView View() { return {scores, sel, group_score, group_ok, chosen}; }
};
// 4-byte words of one warp's scratch for E experts, and its view at `base` (4-byte aligned).
__host__ __device__ constexpr int64_t WarpRouteScratchWords(int64_t E) { return 2 * E + 64 + 16 + 32; }
__device__ inline WarpRouteView WarpRouteScratchAt(float* base, int64_t E) {
  return {base, base + E, base + 2 * E, reinterpret_cast<bool*>(base + 2 * E + 64),
          reinterpret_cast<int*>(base + 2 * E + 64 + 16)};
}
// Every lane of the calling warp must call it (warp-synchronous; no block barrier). The logits
// are read through L2 (ld.global.cg): they may have been written by other blocks of the same
// grid before a fence (moe_router_route.cu).
// kPer: experts a lane holds (E <= 32 kPer); a smaller kPer than the default runs the same
// operations on the same values (the lanes' missing experts were -inf / 0 terms): the same bits,
// a quarter of the unrolled code at kPer 2 (E <= 64; the persistent MoE kernel, session 24).
// The caller guarantees num_experts <= 32 kPer (experts beyond would not be considered).
// kGiven (MoePersistentParams::router_tagged, session 31): the logits come in `given` (given[j]:
// expert lane + 32 j, -inf past E), already in registers, instead of from p.logits.
template <int kPer = kWarpRouteMaxExperts / 32, bool kGiven = false>
__device__ inline void RouteTokenInWarp(const MoeRoutingParams& p, int64_t t, const WarpRouteView& ws,
                                        const float* given = nullptr) {
  static_assert(kPer >= 1 && kPer <= kWarpRouteMaxExperts / 32, "kPer");
  const int lane = threadIdx.x & 31;
  const int E = static_cast<int>(p.num_experts);
  const float* lg = p.logits + t * p.num_experts;
  float x[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int e = lane + 32 * j;
    if constexpr (kGiven) x[j] = given[j];
    else x[j] = e < E ? __ldcg(lg + e) : -INFINITY;
  }
  if (p.scoring == 0) {
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPer; ++j) m = fmaxf(m, x[j]);
    // The warp's max in one reduction of order-preserving keys (the same value as a butterfly of
    // fmaxf for finite and infinite logits).
    m = FloatOfOrderedKey(__reduce_max_sync(0xffffffffu, OrderedKey(m)));
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      x[j] = lane + 32 * j < E ? expf(x[j] - m) : 0.f;
      s += x[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] /= s;
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] = 1.0f / (1.0f + expf(-x[j]));
  }
  float sel[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int e = lane + 32 * j;
    sel[j] = e < E ? x[j] + (p.bias ? p.bias[e] : 0.f) : -INFINITY;
    if (e < E) {
      ws.scores[e] = x[j];
      ws.sel[e] = sel[j];
    }
  }
  __syncwarp();
  if (p.topk_method != 0 && p.n_group > 1) {
    const int gs = E / p.n_group;
    for (int g = lane; g < p.n_group; g += 32) {
      ws.group_score[g] = GroupScore(p, ws.sel, g, gs);
      ws.group_ok[g] = false;
    }
    __syncwarp();
    if (lane == 0) PickGroups(p, ws.group_score, ws.group_ok);
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = lane + 32 * j;
      if (e < E && !ws.group_ok[e / gs]) sel[j] = -INFINITY;
    }
  }
  unsigned taken = 0;  // bit j: expert lane + 32 j chosen
  for (int r = 0; r < p.top_k; ++r) {
    float v = -INFINITY; int idx = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = lane + 32 * j;
      if (e >= E || (taken >> j & 1u)) continue;
      if (idx == 0x7fffffff || sel[j] > v || (sel[j] == v && e < idx)) { v = sel[j]; idx = e; }
    }
    // The warp's argmax, ties to the lower expert: the largest key, then the lowest index among the
    // lanes holding it (two reductions; the butterfly of (value, index) pairs it replaces picked
    // the same expert for every non-NaN value: -0 and +0 have one key, as they compare equal).
    const unsigned key = OrderedKey(v);
    const unsigned kmax = __reduce_max_sync(0xffffffffu, key);
    idx = static_cast<int>(__reduce_min_sync(0xffffffffu, key == kmax ? static_cast<unsigned>(idx) : 0xffffffffu));
    if (idx != 0x7fffffff && (idx & 31) == lane) taken |= 1u << (idx >> 5);
    if (lane == 0) ws.chosen[r] = idx;
  }
  __syncwarp();
  // Row t's weights: WriteTopk's operations, the entries on lanes r < top_k (the norm_topk_prob sum
  // in chosen order by every lane, only when it is used).
  float sum = 0.f;
  if (p.norm_topk_prob)
    for (int r = 0; r < p.top_k; ++r) {
      const int e = ws.chosen[r];
      sum += e < E ? ws.scores[e] : NAN;
    }
  const float denom = p.norm_topk_prob ? sum + 1e-20f : 1.0f;
  for (int r = lane; r < p.top_k; r += 32) {
    const int e = ws.chosen[r];
    p.topk_ids[t * p.top_k + r] = e;
    p.topk_weights[t * p.top_k + r] = (e < E ? ws.scores[e] : NAN) / denom * p.routed_scaling_factor;
  }
  __syncwarp();  // the scratch may be reused for the warp's next token
}

// Warp 0 of the block routes token t (RouteTokenInWarp). Every thread of the block must call it
// (it ends with a block barrier).
__device__ inline void RouteTokenWarp(const MoeRoutingParams& p, int64_t t) {
  __shared__ WarpRouteScratch ws;
  if (threadIdx.x < 32) RouteTokenInWarp(p, t, ws.View());
  __syncthreads();
}

// Routes token t (row t of p.logits) and writes p.topk_ids / p.topk_weights row t (thread 0).
// Every thread of the block (blockDim.x == kMoeRoutingThreads) must call it.
__device__ inline void RouteToken(const MoeRoutingParams& p, int64_t t) {
  if (p.warp_route && p.num_experts <= kWarpRouteMaxExperts) {
    RouteTokenWarp(p, t);
    return;
  }
  __shared__ float scores[kMaxExperts];
  __shared__ float sel[kMaxExperts];
  __shared__ float group_score[64];
  __shared__ bool group_ok[64];
  __shared__ float red[32];
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float best_v;
  __shared__ int best_i;
  __shared__ int chosen[32];
  const int E = static_cast<int>(p.num_experts);
  const float* lg = p.logits + t * p.num_experts;
  // Scores.
  if (p.scoring == 0) {
    float m = -INFINITY;
    for (int e = threadIdx.x; e < E; e += blockDim.x) m = fmaxf(m, lg[e]);
    m = dev::BlockMax(m, red);
    float s = 0.f;
    for (int e = threadIdx.x; e < E; e += blockDim.x) { const float x = expf(lg[e] - m); scores[e] = x; s += x; }
    s = dev::BlockSum(s, red);
    for (int e = threadIdx.x; e < E; e += blockDim.x) scores[e] /= s;
  } else {
    for (int e = threadIdx.x; e < E; e += blockDim.x) scores[e] = 1.0f / (1.0f + expf(-lg[e]));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) sel[e] = scores[e] + (p.bias ? p.bias[e] : 0.f);
  __syncthreads();
  // Group masking.
  if (p.topk_method != 0 && p.n_group > 1) {
    const int gs = E / p.n_group;
    if (threadIdx.x < p.n_group) {
      const int g = threadIdx.x;
      group_score[g] = GroupScore(p, sel, g, gs);
      group_ok[g] = false;
    }
    __syncthreads();
    if (threadIdx.x == 0) PickGroups(p, group_score, group_ok);
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x)
      if (!group_ok[e / gs]) sel[e] = -INFINITY;
    __syncthreads();
  }
  // Top-k by repeated argmax (masked experts have -inf; picked ones are set to NaN-free -inf
  // and excluded through `chosen`).
  for (int r = 0; r < p.top_k; ++r) {
    float v = -INFINITY; int idx = 0x7fffffff;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      bool taken = false;
      for (int j = 0; j < r; ++j) taken |= (chosen[j] == e);
      if (taken) continue;
      const float s = sel[e];
      if (idx == 0x7fffffff || s > v || (s == v && e < idx)) { v = s; idx = e; }
    }
    BlockArgMax(v, idx, sv, si, &best_v, &best_i);
    if (threadIdx.x == 0) chosen[r] = best_i;
    __syncthreads();
  }
  if (threadIdx.x == 0) WriteTopk(p, t, scores, chosen);
}

}  // namespace ds::cuda::routing
