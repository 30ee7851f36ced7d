#include "backend/cuda/moe_persistent.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/grid_barrier.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/moe_tagged.cuh"
#include "backend/cuda/router_gemv.cuh"
#include "common/check.h"
#include "common/logging.h"

namespace ds::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = router::kThreads, kWarps = kThreads / 32;
static_assert(kThreads == routing::kMoeRoutingThreads, "one block size for the router GEMV and the routing");
constexpr int kMaxTopK = 16;

using ptx::WarpTile16;

using grid::GridBarrier;
using moe_dev::LdTagged;
using moe_dev::PollTagged;
using moe_dev::SiluMul;
using moe_dev::StTagged;

// Copies n8 16-byte vectors from global (through L2: written by other blocks of this grid) to
// shared memory, by the whole block: kCopyBatch loads a thread in flight before their stores
// (V2-Lite's 22.5 KB of act: one L2 round trip, not six).
constexpr int kCopyBatch = 8;
__device__ __forceinline__ void CopyToSmem(uint4* dst, const uint4* src, int64_t n8) {
  for (int64_t i0 = threadIdx.x; i0 < n8; i0 += int64_t{kCopyBatch} * blockDim.x) {
    uint4 v[kCopyBatch];
#pragma unroll
    for (int u = 0; u < kCopyBatch; ++u)
      if (i0 + u * blockDim.x < n8) v[u] = __ldcg(src + i0 + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < kCopyBatch; ++u)
      if (i0 + u * blockDim.x < n8) dst[i0 + u * blockDim.x] = v[u];
  }
}

// Down tiles: 8 output columns; a tile's segments (routed slot j, then the shared experts' down in
// chunks of I) in pairs per 16-row mma (B's columns 0 and 1), each pair's K split over the
// block's warps when there are fewer pairs than warps.
constexpr int kDownTile = 8;
constexpr int kMaxSegments = kMaxTopK + kMoePersistentMaxSharedChunks;
constexpr int kMaxUnits = (kMaxSegments + 1) / 2 * 2;  // pairs x K splits never exceed this (see below)

// kMinBlocks blocks per SM (the register cap that lets them fit: 2 -> <= 128 registers).
// kPdl: launched as a programmatic dependent (MoePersistentParams::pdl): the wait for the previous
// kernel comes first (launch.cuh's rule), then the release of the next; a separate
// instantiation, so the default kernel's code is the one measured without it.
// kPf: the weight loads' L2 fetch size (MoePersistentParams::l2_fetch; ptx::LdStreamPf).
// kProd (session 28; MoePersistentSpecialized): the runner's form fixed at compile time (the
// post-attention norm folded in, shared_first, gu_ksplit 8, no next norm, routed experts, no
// stamps, not barriers_only): no code for the other forms on its path (as MlaAttnPersistent's).
// kV2Lite (with kProd; specialize 2): DeepSeek-V2-Lite's shapes fixed too (hidden 2048, 64
// experts, top 6, I 1408, shared I 2816), so the tile and unit index arithmetic is on constants.
// kTagged (with kProd, E <= 64; MoePersistentParams::router_tagged): the router logits as tagged
// words, polled by the routing warp (no router_ready count), first loaded beside the block's last
// shared-expert tile.
template <int kMinBlocks, bool kPdl, int kPf = 0, bool kProd = false, bool kV2Lite = false, bool kTagged = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks) MoePersistentKernel(MoePersistentParams p) {
  if constexpr (kPdl) dev::PdlWaitThenRelease();
  extern __shared__ uint4 smem4[];
  const int64_t Hd = kV2Lite ? 2048 : p.hidden, E = kV2Lite ? 64 : p.num_experts, K = kV2Lite ? 6 : p.top_k,
                I = kV2Lite ? 1408 : p.inter, Is = kV2Lite ? 2816 : p.shared_inter;
  // Dynamic shared memory: bf16 region (phase 2: x16 [hidden]; phase 3: act [top_k I + Is]), then
  // the fp32 router input x32 [hidden].
  bf16* xs = reinterpret_cast<bf16*>(smem4);
  float* x32s = reinterpret_cast<float*>(smem4 + (std::max(Hd, K * I + Is) + 7) / 8);
  __shared__ routing::WarpRouteScratch route_ws;
  __shared__ int32_t s_ids[kMaxTopK];
  __shared__ float s_w[kMaxTopK];
  __shared__ float s_part[kMaxUnits][2][kDownTile];  // phase 3: each unit's sums (pair's two segments)
  __shared__ float s_vals[kMoePersistentMaxTilesPerBlock][kDownTile];  // the block's new residuals
  __shared__ float s_gu[kMoePersistentMaxGuRounds][kWarps][16];  // gu_ksplit > 1: the parts' gate / up sums
  __shared__ float s_red[32];
  __shared__ float s_total;
  __shared__ uint64_t s_base;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int grid = static_cast<int>(gridDim.x);
  const bool work = kProd || !p.barriers_only;
  const auto stamp = [&](int i) {
    if (!kProd && p.stamps && threadIdx.x == 0) p.stamps[blockIdx.x * kMoePersistentStamps + i] = static_cast<long long>(dev::GlobalTimerNs());
  };
  stamp(0);
  const auto tstamp = [&](int i) {
    if (!kProd && p.tile_stamps && threadIdx.x == 0 && i < kMoePersistentTileStamps)
      p.tile_stamps[blockIdx.x * kMoePersistentTileStamps + i] = static_cast<long long>(dev::GlobalTimerNs());
  };
  if (threadIdx.x == 0) s_base = grid::GridBase(p.sync);  // no barrier of this launch has completed yet
  // Phase 0: the router's fp32 input and the experts' bf16 input in shared memory: x32 / x16 as
  // given, or (attn_out) the post-attention norm of residual + attn_out computed by every block
  // (RmsNormRow's operations per element, the sum of squares over this block's threads).
  if (kProd || p.attn_out) {
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < Hd; i += kThreads) {
      const float v = p.attn_out[i] + p.residual[i];
      x32s[i] = v;
      ss += v * v;
    }
    const float total = dev::BlockSum(ss, s_red);
    const float inv = rsqrtf(total / static_cast<float>(Hd) + p.eps);
    for (int64_t i = threadIdx.x; i < Hd; i += kThreads) {
      const float o = x32s[i] * inv * p.post_norm_weight[i];
      x32s[i] = o;
      xs[i] = __float2bfloat16_rn(o);
    }
  } else {
    for (int64_t i = threadIdx.x; i < Hd / 8; i += kThreads) smem4[i] = reinterpret_cast<const uint4*>(p.x16)[i];
    for (int64_t i = threadIdx.x; i < Hd; i += kThreads) x32s[i] = p.x32[i];
  }
  __syncthreads();
  const uint64_t base = s_base;
  // kTagged: this launch's tag (the first launch's is 1, the words start at zero; each launch's
  // differs from the previous one's), the same in every block.
  const uint32_t epoch = static_cast<uint32_t>(base / grid::kGridEpoch) + 1u;

  bf16* act = p.act;
  const int64_t it = I / 8, tiles_r = K * it, tiles = tiles_r + Is / 8;
  // Tile t's weights (8 gate rows at gate_row(t), the same 8 up rows at + half) and outputs.
  const auto tile_at = [&](int64_t t, const bf16*& w, int64_t& c0, int64_t& half, bf16*& out) {
    if (t < tiles_r) {
      const int64_t j = t / it;
      c0 = (t % it) * 8;
      w = p.w13 + static_cast<int64_t>(s_ids[j]) * 2 * I * Hd;
      half = I;
      out = act + j * I + c0;
    } else {
      c0 = (t - tiles_r) * 8;
      w = p.shared_gu;
      half = Is;
      out = act + K * I + c0;
    }
  };
  // gu_ksplit > 1 (see phase 2): slots of ksp warps, each warp a part of its slot's tile.
  const int ksp = kProd ? 8 : p.gu_ksplit, slots = kWarps / ksp, slot = warp / ksp, part = warp % ksp;
  const auto gu_part = [&](int64_t t, int r) {
    const bf16* wb;
    int64_t c0, half;
    bf16* out;
    tile_at(t, wb, c0, half, out);
    const int64_t kw = Hd / ksp, k0 = part * kw;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    WarpTile16<kPf>(wb + (c0 + g) * Hd + k0, wb + (half + c0 + g) * Hd + k0, xs + k0, xs + k0, static_cast<int>(kw / 32), d);
    if (q == 0) {
      s_gu[r][warp][g] = d[0];
      s_gu[r][warp][8 + g] = d[2];
    }
  };

  // Phase 1: router logit columns (blocks b, b + grid, ...): thread t takes k = t, t + 256, ...,
  // then a block sum.
  for (int64_t n = blockIdx.x; work && n < E; n += grid) {
    const float* wr = p.router_w + n * Hd;
    float acc = 0.f;
    for (int64_t k = threadIdx.x; k < Hd; k += kThreads) acc = fmaf(x32s[k], __ldg(wr + k), acc);
    acc = dev::BlockSum(acc, s_red);
    if (threadIdx.x == 0) p.logits[n] = acc;
    if constexpr (kTagged)
      if (threadIdx.x == 0) StTagged(p.router_tagged + n, epoch, acc);
  }
  // Dense (top_k == 0, no routed experts): no router, no routing, no barrier 1; the barriers
  // that remain count from 1.
  // (These two as ternaries: written "kProd || ...", they changed the generic instantiation's SASS,
  // its first gate_up loops' loads in flight among it; session 28 run 9.)
  const bool routed = kProd ? true : K > 0;
  // shared_first (p.router_ready): no barrier 1. A router block counts its logits written
  // (thread 0 wrote them: its release add orders them), and a block waits for all router blocks'
  // counts only before it routes (before its first routed tile, or after phase 2).
  const bool shared_first = kProd ? true : p.router_ready != nullptr;
  const uint32_t router_blocks = static_cast<uint32_t>(std::min<int64_t>(E, grid));
  // (kTagged: no count. Written as a ternary: `!kTagged && ...` or an `if constexpr` around it
  // changed the generic instantiations' code, session 31, as session 28 found for kProd.)
  if (kTagged ? false : shared_first && routed && work && blockIdx.x < E && threadIdx.x == 0)
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.router_ready) : "memory");
  // kTagged: warp 0's words of the tagged logits (experts lane and lane + 32), loaded early.
  uint64_t tag_w0 = 0, tag_w1 = 0;
  int nbar = 0;
  stamp(1);
  if (routed && !shared_first) GridBarrier(p.sync, base + (++nbar) * gridDim.x);
  stamp(2);

  // Phase 2: routing (every block, the same bits), then gate_up + SiLU tiles of 8 act columns
  // (8 gate + the same 8 up rows): the routed slots' tiles, then the shared experts'. Tile t goes
  // to block t % grid (consecutive tiles on different blocks: every SM gets its share); with
  // shared_first, the shared experts' tiles come first (see below).
  // Block-uniform (it holds block barriers).
  const auto route_token = [&]() {
    tstamp(0);
    if constexpr (!kTagged) {
      if (shared_first && work) {  // every router block's logits written
        if (threadIdx.x == 0)
          while (grid::LdAcquire(p.router_ready) < router_blocks) {
          }
        __syncthreads();
      }
    }
    tstamp(1);
    MoeRoutingParams rp = p.routing;
    rp.logits = p.logits;
    rp.n = 1;
    rp.topk_ids = s_ids;
    rp.topk_weights = s_w;
    // E <= 64 (V2-Lite): two experts a lane, a quarter of the unrolled code and of its latency
    // chain (the routing ~3.2 against ~5.5 us a block under the phase's load; session 24 run 6);
    // the same bits.
    if constexpr (kTagged) {
      if (warp == 0) {
        float x[2];
        PollTagged(p.router_tagged, static_cast<int>(E), epoch, tag_w0, tag_w1, x);
        routing::RouteTokenInWarp<2, true>(rp, 0, route_ws.View(), x);
      }
    } else if (warp == 0 && work) {
      if (E <= 64) routing::RouteTokenInWarp<2>(rp, 0, route_ws.View());
      else routing::RouteTokenInWarp(rp, 0, route_ws.View());
    }
    if (!work && threadIdx.x < K) { s_ids[threadIdx.x] = static_cast<int32_t>(threadIdx.x); s_w[threadIdx.x] = 0.f; }
    __syncthreads();
    tstamp(2);
    // An id out of range (not expected: the warp routing's argmax ranks a NaN score highest, so it
    // always finds a candidate) would read expert 0 instead: a defensive clamp, never a fault.
    if (threadIdx.x < K && (s_ids[threadIdx.x] < 0 || s_ids[threadIdx.x] >= E)) s_ids[threadIdx.x] = 0;
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x < K) {
      p.topk_ids[threadIdx.x] = s_ids[threadIdx.x];
      p.topk_weights[threadIdx.x] = s_w[threadIdx.x];
    }
    tstamp(3);
  };
  if (routed && !shared_first) route_token();
  // shared_first (gu_ksplit 8: a tile on all 8 warps of a block, so the rounds are block-uniform):
  // index i < Is / 8 is shared tile i (known before the routing), then the routed slots' tiles;
  // a block routes before its first routed round, or after phase 2 if it has none (phase 3
  // needs the ids).
  const int64_t ts = shared_first ? Is / 8 : 0;
  const auto tile_of = [&](int64_t i) { return !shared_first ? i : i < ts ? tiles_r + i : i - ts; };
  bool routed_here = !routed || !shared_first;
  if (kProd ? false : p.gu_ksplit <= 1) {
    // One tile a warp over all of hidden: tile t on block t % grid, warp t / grid (consecutive
    // tiles on different blocks: every SM gets its share).
    for (int64_t t = blockIdx.x + int64_t{grid} * warp; work && t < tiles; t += int64_t{grid} * kWarps) {
      const bf16* wb;
      int64_t c0, half;
      bf16* out;
      tile_at(t, wb, c0, half, out);
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      WarpTile16<kPf>(wb + (c0 + g) * Hd, wb + (half + c0 + g) * Hd, xs, xs, static_cast<int>(Hd / 32), d);
      if (q == 0) out[g] = SiluMul(d[0], d[2]);
    }
  } else {
    // gu_ksplit = ks: a tile's hidden split into ks parts on ks warps of one block (slot = warp /
    // ks, part = warp % ks), kWarps / ks tiles at a time: tile t on block t % grid, slot
    // (t / grid) % slots, round t / (grid * slots). The parts' sums go to shared memory; after
    // every round, threads add them in part order and apply the SiLU (deterministic).
    // Two loops, the routing between them (before the first routed tile, or after the last tile):
    // with more of the routing's state inside one loop ptxas issued each burst's loads one step at
    // a time (2 loads, 2 mmas; session 24 run 7, +12% on the step).
    int r = 0;
    int64_t i = blockIdx.x + int64_t{grid} * slot;
    for (; work && i < tiles && (routed_here || i < ts); i += int64_t{grid} * slots, ++r) {
      if constexpr (kTagged)  // the block's last shared tile: the logits' loads beside its weights
        if (warp == 0 && !routed_here && i + int64_t{grid} * slots >= ts) LdTagged(p.router_tagged, static_cast<int>(E), tag_w0, tag_w1);
      gu_part(tile_of(i), r);
      tstamp(4 + r);
    }
    if (!routed_here) {
      route_token();
      routed_here = true;
    }
    for (; work && i < tiles; i += int64_t{grid} * slots, ++r) {
      gu_part(tile_of(i), r);
      tstamp(4 + r);
    }
    __syncthreads();
    const int64_t rounds = (tiles + int64_t{grid} * slots - 1) / (int64_t{grid} * slots);
    for (int64_t idx = threadIdx.x; work && idx < rounds * slots * 8; idx += kThreads) {
      const int rr = static_cast<int>(idx / (slots * 8)), sl = static_cast<int>(idx % (slots * 8)) / 8,
                c = static_cast<int>(idx % 8);
      const int64_t ti = blockIdx.x + int64_t{grid} * (sl + int64_t{slots} * rr);
      if (ti >= tiles) continue;
      const int64_t t = tile_of(ti);
      const bf16* wb;
      int64_t c0, half;
      bf16* out;
      tile_at(t, wb, c0, half, out);
      float gs = 0.f, us = 0.f;
      for (int pp = 0; pp < ksp; ++pp) {
        gs += s_gu[rr][sl * ksp + pp][c];
        us += s_gu[rr][sl * ksp + pp][8 + c];
      }
      out[c] = SiluMul(gs, us);
    }
  }
  const int64_t dtiles = Hd / kDownTile;
  const int nsc = static_cast<int>(Is / I), nseg = static_cast<int>(K) + nsc;
  // Without a next norm (norm_weight == nullptr) phase 3 is the last: barrier 2 is the final one.
  const bool next_norm = !kProd && p.norm_weight != nullptr;
  stamp(3);
  GridBarrier(p.sync, base + (++nbar) * gridDim.x, /*final=*/!next_norm);
  // shared_first: every block has passed its wait: the count back to zero for the next launch
  // (stream-ordered after this one).
  if (shared_first && blockIdx.x == 0 && threadIdx.x == 0) *p.router_ready = 0u;
  stamp(4);

  // Phase 3: down tiles of 8 output columns (tile i on block i % grid). Segment s < top_k is slot
  // s (w2[id_s] rows, act_s), s >= top_k the shared experts' down chunk s - top_k (its columns
  // [c I, (c + 1) I), the same act chunk). Pairs of segments share an mma (B columns 0 / 1); with
  // P pairs, each pair's K is split into ks = max(1, 8 / P) contiguous ranges: unit u = pair
  // u / ks, range u % ks, on warp u % 8. Then 8 threads finish the columns: y_s = the ranges'
  // sums in order; moe = the shared chunks' y in chunk order + sum_j w_j bf16(y_j) (MoeCombineNorm's
  // order), residual (+ attn_out) += moe, and the block's sum of squares.
  const int npair = (nseg + 1) / 2;
  const int ks = npair >= kWarps ? 1 : kWarps / npair, nunit = npair * ks;
  const int steps = static_cast<int>(I / 32);
  // Unit u of down tile `tile`: this lane's row (output column n0 + g) of the pair's two segments
  // (the mma tile's rows g and g + 8), their activations, the unit's K range in 32-steps.
  const auto unit_at = [&](int64_t tile, int u, const bf16* (&row)[2], const bf16* (&x)[2], int& s0, int& s1) {
    const int64_t n0 = tile * kDownTile;
    const int pair = u / ks, r = u % ks;
    s0 = steps * r / ks;
    s1 = steps * (r + 1) / ks;
    for (int h = 0; h < 2; ++h) {
      const int seg = std::min(2 * pair + h, nseg - 1);  // an odd last pair repeats its segment
      if (seg < K) {
        row[h] = p.w2 + (static_cast<int64_t>(s_ids[seg]) * Hd + n0 + g) * I;
        x[h] = xs + seg * I;
      } else {
        row[h] = p.shared_down + (n0 + g) * Is + (seg - K) * I;
        x[h] = xs + K * I + (seg - K) * I;
      }
    }
  };
  // The first tile's residual (+ attn_out) for the 8 threads that finish its columns, loaded before
  // the act copy: by the end of the tile it is in registers, not an L2 round trip at the kernel's
  // end (nothing writes these columns before this block does, at the end of phase 3).
  float r1_first = 0.f;
  if (work && threadIdx.x < kDownTile && blockIdx.x < dtiles) {
    const int64_t n = int64_t{blockIdx.x} * kDownTile + threadIdx.x;
    r1_first = p.residual[n];
    if (kProd || p.attn_out) r1_first = p.attn_out[n] + r1_first;
  }
  if (work && blockIdx.x < dtiles) CopyToSmem(smem4, reinterpret_cast<const uint4*>(act), (K * I + Is) / 8);
  __syncthreads();
  int ntile = 0;
  for (int64_t tile = blockIdx.x; work && tile < dtiles; tile += grid, ++ntile) {
    const int64_t n0 = tile * kDownTile;
    for (int u = warp; u < nunit; u += kWarps) {
      const bf16* row[2];
      const bf16* x[2];
      int s0, s1;
      unit_at(tile, u, row, x, s0, s1);
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      WarpTile16<kPf>(row[0] + 32 * s0, row[1] + 32 * s0, x[0] + 32 * s0, x[1] + 32 * s0, s1 - s0, d);
      if (q == 0) {
        s_part[u][0][g] = d[0];
        s_part[u][1][g] = d[3];
      }
    }
    __syncthreads();
    if (threadIdx.x < kDownTile) {
      const int c = threadIdx.x;
      const int64_t n = n0 + c;
      const auto y = [&](int seg) {
        const int pair = seg / 2, h = seg % 2;
        float v = 0.f;
        for (int r = 0; r < ks; ++r) v += s_part[pair * ks + r][h][c];
        return v;
      };
      float acc = 0.f;
      for (int sc = 0; sc < nsc; ++sc) acc += y(static_cast<int>(K) + sc);
      for (int j = 0; j < K; ++j) acc += s_w[j] * __bfloat162float(__float2bfloat16_rn(y(j)));
      float r1 = r1_first;
      if (ntile > 0) {
        r1 = p.residual[n];
        if (kProd || p.attn_out) r1 = p.attn_out[n] + r1;
      }
      const float v = acc + r1;
      p.residual[n] = v;
      s_vals[ntile][c] = v;
    }
    __syncthreads();
  }
  if (!next_norm) {
    stamp(5);
    stamp(6);
    stamp(7);
    return;
  }
  if (threadIdx.x == 0) {
    float b = 0.f;
    for (int k = 0; k < ntile; ++k)
      for (int c = 0; c < kDownTile; ++c) b += s_vals[k][c] * s_vals[k][c];
    p.partials[blockIdx.x] = b;
  }
  stamp(5);
  GridBarrier(p.sync, base + (++nbar) * gridDim.x, /*final=*/true);
  stamp(6);

  // Phase 4: the next RMSNorm of the columns this block finished. The blocks' partial sums are
  // added lane-strided then by a butterfly: a fixed order, the same in every block.
  if (warp == 0) {
    float t = 0.f;
    for (int b = lane; b < grid; b += 32) t += __ldcg(p.partials + b);
    t = dev::WarpSum(t);
    if (lane == 0) s_total = t;
  }
  __syncthreads();
  const float inv = rsqrtf(s_total / static_cast<float>(Hd) + p.eps);
  if (work && threadIdx.x < kDownTile) {
    int k = 0;
    for (int64_t tile = blockIdx.x; tile < dtiles; tile += grid, ++k) {
      const int64_t n = tile * kDownTile + threadIdx.x;
      const float o = s_vals[k][threadIdx.x] * inv * p.norm_weight[n];
      p.out32[n] = o;
      if (p.out16) p.out16[n] = __float2bfloat16_rn(o);
    }
  }
  stamp(7);
}

// The bf16 region, then x32.
size_t SmemBytes(const MoePersistentParams& p) {
  return sizeof(bf16) * static_cast<size_t>((std::max(p.hidden, p.top_k * p.inter + p.shared_inter) + 7) / 8 * 8) +
         sizeof(float) * static_cast<size_t>(p.hidden);
}

void (*KernelFor(int blocks_per_sm, bool pdl = false, int l2_fetch = 0))(MoePersistentParams) {
  if (pdl) return blocks_per_sm == 2 ? MoePersistentKernel<2, true> : MoePersistentKernel<1, true>;
  if (l2_fetch == 2) return blocks_per_sm == 2 ? MoePersistentKernel<2, false, 2> : MoePersistentKernel<1, false, 2>;
  if (l2_fetch == 1) return blocks_per_sm == 2 ? MoePersistentKernel<2, false, 1> : MoePersistentKernel<1, false, 1>;
  return blocks_per_sm == 2 ? MoePersistentKernel<2, false> : MoePersistentKernel<1, false>;
}

// Whether blocks_per_sm blocks with `smem` bytes of dynamic shared memory fit an SM of the current
// device, and the device runs cooperative launches; the answer cached per (device, variant, smem)
// under a mutex (runners on several devices may ask from several threads). Raises the kernel's
// dynamic shared memory limit on this device first where smem needs it.
bool FitsCurrentDevice(int blocks_per_sm, size_t smem, bool pdl = false) {
  static std::mutex mu;
  static auto* known = new std::map<std::tuple<int, int, size_t, bool>, bool>();
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, blocks_per_sm, smem, pdl);
  if (const auto it = known->find(key); it != known->end()) return it->second;
  int coop = 0;
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  bool fits = coop != 0 && smem <= 227 * 1024;
  if (fits) {  // the instantiation asked for (pdl: MoePersistentParams::pdl's)
    void (*kernel)(MoePersistentParams) = KernelFor(blocks_per_sm, pdl);
    if (smem > 48 * 1024) EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
    int per_sm = 0;
    DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    fits = per_sm >= blocks_per_sm;
  }
  (*known)[key] = fits;
  return fits;
}

}  // namespace

int MoePersistentGridBlocks(int blocks_per_sm) { return CurrentDeviceProps().sms * blocks_per_sm; }

namespace {
bool GuKsplitFits(const MoePersistentParams& p, int ks) {
  if (ks <= 1) return true;
  const int64_t grid = MoePersistentGridBlocks(std::clamp(p.blocks_per_sm, 1, 2));
  const int64_t tiles = (p.top_k * p.inter + p.shared_inter) / 8, per_round = grid * (kWarps / ks);
  return p.hidden % (32 * ks) == 0 && (tiles + per_round - 1) / per_round <= kMoePersistentMaxGuRounds;
}
}  // namespace

int MoePersistentGuKsplitFor(const MoePersistentParams& p, int wanted) {
  int ks = wanted >= 8 ? 8 : wanted >= 4 ? 4 : wanted >= 2 ? 2 : 1;
  while (ks > 1 && !GuKsplitFits(p, ks)) ks /= 2;
  return ks;
}

std::string MoePersistentUnsupported(const MoePersistentParams& p) {
  std::ostringstream why;
  const int64_t W = int64_t{MoePersistentGridBlocks(std::clamp(p.blocks_per_sm, 1, 2))} * kWarps;
  if (p.blocks_per_sm < 1 || p.blocks_per_sm > 2) why << "blocks_per_sm " << p.blocks_per_sm << " (1 or 2); ";
  const MoeRoutingParams& r = p.routing;
  if (p.hidden < 8 || p.hidden % 8 != 0) why << "hidden " << p.hidden << " is not a positive multiple of 8; ";
  if (p.inter < 8 || p.inter % 8 != 0) why << "moe_intermediate_size " << p.inter << " is not a positive multiple of 8; ";
  if (p.shared_inter < 0 || p.shared_inter % 16 != 0)
    why << "shared intermediate size " << p.shared_inter << " is not a multiple of 16; ";
  if ((p.shared_inter > 0) != (p.shared_gu != nullptr && p.shared_down != nullptr))
    why << "shared experts' weights and size disagree; ";
  // Dense (no routed experts): num_experts == top_k == 0 and the MLP as the "shared" weights.
  const bool dense = p.num_experts == 0 && p.top_k == 0;
  if (dense) {
    if (p.shared_inter <= 0) why << "a dense layer (no routed experts) needs its MLP as the shared weights; ";
  } else {
    if (p.num_experts < 1 || p.num_experts > routing::kWarpRouteMaxExperts)
      why << "num_experts " << p.num_experts << " (1.." << routing::kWarpRouteMaxExperts << "); ";
    if (p.top_k < 1 || p.top_k > kMaxTopK || p.top_k > p.num_experts) why << "top_k " << p.top_k << "; ";
    if (r.num_experts != p.num_experts || r.top_k != p.top_k) why << "routing's E / top_k differ; ";
    if (r.n_group < 1 || r.n_group > 64 || p.num_experts % std::max(r.n_group, 1) != 0 || r.topk_group < 1 ||
        r.topk_group > r.n_group)
      why << "n_group " << r.n_group << " / topk_group " << r.topk_group << "; ";
  }
  if (p.hidden % 32 != 0 || p.inter % 32 != 0)
    why << "hidden and I (" << p.hidden << ", " << p.inter << ") must be multiples of 32 (the tensor-core tiles' steps); ";
  if (p.shared_inter % std::max<int64_t>(p.inter, 1) != 0 || p.shared_inter / std::max<int64_t>(p.inter, 1) > kMoePersistentMaxSharedChunks)
    why << "shared intermediate size " << p.shared_inter << " is not a multiple of I up to "
        << kMoePersistentMaxSharedChunks << " x; ";
  if (p.attn_out && !p.post_norm_weight) why << "attn_out without post_norm_weight; ";
  if (p.gu_ksplit != 1 && p.gu_ksplit != 2 && p.gu_ksplit != 4 && p.gu_ksplit != 8) {
    why << "gu_ksplit " << p.gu_ksplit << " (1, 2, 4 or 8); ";
  } else if (!GuKsplitFits(p, p.gu_ksplit)) {
    why << "gu_ksplit " << p.gu_ksplit << " does not fit hidden " << p.hidden
        << " (a multiple of 32 x the split) or needs more than " << kMoePersistentMaxGuRounds << " rounds; ";
  }
  if (p.router_ready != nullptr && p.gu_ksplit != kWarps) why << "shared_first (router_ready) needs gu_ksplit " << kWarps << "; ";
  if (reinterpret_cast<uintptr_t>(p.router_ready) % 4 != 0) why << "router_ready must be 4-byte aligned; ";
  if (reinterpret_cast<uintptr_t>(p.router_tagged) % 8 != 0) why << "router_tagged must be 8-byte aligned; ";
  if (p.hidden > int64_t{kDownTile} * kMoePersistentMaxTilesPerBlock * (W / kWarps))
    why << "hidden " << p.hidden << " over the down tiles a block keeps; ";
  if (SmemBytes(p) > 200 * 1024) {
    why << "activations need " << SmemBytes(p) << " bytes of shared memory; ";
  } else if (p.blocks_per_sm >= 1 && p.blocks_per_sm <= 2 && !FitsCurrentDevice(p.blocks_per_sm, SmemBytes(p))) {
    why << p.blocks_per_sm << " blocks with " << SmemBytes(p)
        << " bytes of shared memory do not fit an SM of this device (or it has no cooperative launch); ";
  }
  if (!((p.x32 && p.x16) || (p.attn_out && p.post_norm_weight)) ||
      (!dense && (!p.router_w || !p.w13 || !p.w2 || !p.logits || !p.topk_ids || !p.topk_weights)) || !p.act ||
      !p.residual || (p.norm_weight && !p.out32) || !p.sync || (p.norm_weight && !p.partials))
    why << "null pointer; ";
  const auto misaligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
  if (misaligned(p.x16) || misaligned(p.router_w) || misaligned(p.w13) || misaligned(p.w2) ||
      misaligned(p.act) || (p.shared_gu && (misaligned(p.shared_gu) || misaligned(p.shared_down))))
    why << "operands must be 16-byte aligned; ";
  if (reinterpret_cast<uintptr_t>(p.sync) % 8 != 0) why << "sync must be 8-byte aligned (a 64-bit counter); ";
  if (p.l2_fetch < 0 || p.l2_fetch > 2) why << "l2_fetch " << p.l2_fetch << " (0, 1 or 2); ";
  if (p.specialize < 0 || p.specialize > 2) why << "specialize " << p.specialize << " (0..2); ";
  return why.str();
}

bool PersistentPdlRefused() { return CooperativePdlRefused().load(); }

bool MoePersistentSpecialized(const MoePersistentParams& p) {
  return p.specialize > 0 && !p.pdl && p.l2_fetch == 1 && p.blocks_per_sm == 2 && p.gu_ksplit == 8 && p.top_k > 0 &&
         p.attn_out != nullptr && p.router_ready != nullptr && p.norm_weight == nullptr && p.stamps == nullptr &&
         p.tile_stamps == nullptr && !p.barriers_only;
}

bool MoePersistentTagged(const MoePersistentParams& p) {
  return MoePersistentSpecialized(p) && p.router_tagged != nullptr && p.num_experts <= 64;
}

bool MoePersistent(const MoePersistentParams& p) {
  const std::string why = MoePersistentUnsupported(p);
  DS_CHECK(why.empty()) << "MoePersistent: " << why;
  const size_t smem = SmemBytes(p);
  const dim3 grid(static_cast<unsigned>(MoePersistentGridBlocks(p.blocks_per_sm)));
  // Cooperative: every block resident, as the grid barriers need (the plain instantiation's fit:
  // checked above). pdl: where its own instantiation fits too.
  // (Not once a PDL launch was refused: the fallback would run the plain instantiation chosen here.)
  const bool pdl = p.pdl && !CooperativePdlRefused().load() && FitsCurrentDevice(p.blocks_per_sm, smem, true);
  // l2_fetch: its own instantiation (the same launch bounds and shared memory as the plain one).
  const bool v2lite = p.specialize >= 2 && p.hidden == 2048 && p.num_experts == 64 && p.top_k == 6 && p.inter == 1408 &&
                      p.shared_inter == 2816;
  // router_tagged: its own instantiations of the specialised kernel (MoePersistentTagged).
  const bool tagged = MoePersistentTagged(p);
  void (*plain)(MoePersistentParams) =
      !pdl && MoePersistentSpecialized(p)
          ? (v2lite ? (tagged ? MoePersistentKernel<2, false, 1, true, true, true> : MoePersistentKernel<2, false, 1, true, true>)
                    : (tagged ? MoePersistentKernel<2, false, 1, true, false, true> : MoePersistentKernel<2, false, 1, true>))
          : KernelFor(p.blocks_per_sm, false, pdl ? 0 : p.l2_fetch);
  if (smem > 48 * 1024) EnsureMaxDynamicSmem(reinterpret_cast<const void*>(plain), static_cast<int>(smem));
  SetSmemCarveout(reinterpret_cast<const void*>(plain), p.carveout, p.blocks_per_sm, smem);
  if (pdl) SetSmemCarveout(reinterpret_cast<const void*>(KernelFor(p.blocks_per_sm, true)), p.carveout, p.blocks_per_sm, smem);
  return LaunchCooperativeOrPdl("MoePersistent", pdl, KernelFor(p.blocks_per_sm, true), plain, grid, dim3(kThreads), smem,
                                p.stream, p);
}

}  // namespace ds::cuda
