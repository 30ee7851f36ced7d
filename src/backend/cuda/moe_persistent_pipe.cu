// MoePersistent's pipelined form (moe_persistent_pipe.h). PTX sources: PTX ISA 8.x, "cp.async.bulk",
// "mbarrier" (init, arrive.expect_tx, try_wait.parity: release / acquire at CTA scope), "bar.sync"
// with a thread count (the consumers' named barrier 1), "mma" (m16n8k16 bf16).
#include "backend/cuda/moe_persistent_pipe.h"

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/grid_barrier.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "common/check.h"

namespace ds::cuda::moe_pipe {
namespace {

using bf16 = __nv_bfloat16;
using ptx::Mma;
constexpr int kCons = kConsumerWarps * 32;  // consumer threads (warps 0-7); warp 8 is the producer
constexpr int kMaxTopK = 16;
constexpr int kMaxSegments = kMaxTopK + kMoePersistentMaxSharedChunks;
constexpr int kMaxPairs = (kMaxSegments + 1) / 2;
constexpr int kDownTile = 8;

// The consumers' block barrier (named barrier 1: the producer warp never joins it).
__device__ __forceinline__ void ConsSync() { sm90::NamedBarSync(1, kCons); }

__device__ __forceinline__ float ConsSum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = dev::WarpSum(v);
  ConsSync();
  if (lane == 0) red[warp] = v;
  ConsSync();
  return dev::WarpSum(lane < kConsumerWarps ? red[lane] : 0.f);
}

__device__ __forceinline__ bf16 SiluMul(float g, float u) { return __float2bfloat16_rn(g / (1.0f + expf(-g)) * u); }

// One warp's share of a stage: the dot products of the stage's 16 rows (shared memory, row r at
// slot + r * row_bytes) with the activations over steps [s0, s1) of 32 k, on the tensor cores, with
// the k permutation and B-column layout of moe_persistent.cu's WarpTile16 (d[0] = row g . xa,
// d[2] = row g + 8 . xa, d[3] = row g + 8 . xb).
__device__ __forceinline__ void StageDot(const char* slot, int row_bytes, const bf16* xa, const bf16* xb, int s0,
                                         int s1, float (&d)[4]) {
  const int q = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
  const uint4* a4 = reinterpret_cast<const uint4*>(slot + g * row_bytes) + q;
  const uint4* b4 = reinterpret_cast<const uint4*>(slot + (g + 8) * row_bytes) + q;
  const uint4* x4 = reinterpret_cast<const uint4*>(g == 1 ? xb : xa) + q;
#pragma unroll 4
  for (int s = s0; s < s1; ++s) {
    const uint4 va = a4[4 * s], vb = b4[4 * s], xv = x4[4 * s];
    Mma(d, va.x, vb.x, va.y, vb.y, xv.x, xv.y);
    Mma(d, va.z, vb.z, va.w, vb.w, xv.z, xv.w);
  }
}

// Where a stage's rows come from: rows g < 8 at a + g * sa, rows 8 + g at b + g * sb (elements),
// kst elements each.
struct StageSrc {
  const bf16* a;
  const bf16* b;
  int64_t sa, sb;
};

__global__ void __launch_bounds__(kThreads, 1) MoePipeKernel(MoePersistentParams p) {
  extern __shared__ __align__(128) char smem[];
  const int64_t Hd = p.hidden, E = p.num_experts, K = p.top_k, I = p.inter, Is = p.shared_inter;
  const Geom geo = MakeGeom(Hd, I, K, Is, p.pipe_max_stages, p.pipe_stage_k);
  const int S = geo.stages;
  char* ring = smem;
  bf16* xs = reinterpret_cast<bf16*>(smem + int64_t{geo.slot} * S);
  float* x32s = reinterpret_cast<float*>(smem + int64_t{geo.slot} * S + geo.xs);
  __shared__ __align__(8) uint64_t full_bar[kMaxStages], empty_bar[kMaxStages], route_bar;
  __shared__ routing::WarpRouteScratch route_ws;
  __shared__ int32_t s_ids[kMaxTopK];
  __shared__ float s_w[kMaxTopK];
  __shared__ float s_gu[2][kConsumerWarps][8][2];                         // gate_up tile sums a warp
  __shared__ float s_part[2][kMaxPairs][kConsumerWarps][2][kDownTile];    // down tile sums a warp
  __shared__ float s_vals[kMoePersistentMaxTilesPerBlock][kDownTile];     // the block's new residuals
  __shared__ float s_red[32];
  __shared__ float s_total;
  __shared__ uint32_t s_gen0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int grid = static_cast<int>(gridDim.x);
  const bool work = !p.barriers_only;
  const auto stamp = [&](int i) {
    if (p.stamps && threadIdx.x == 0) p.stamps[blockIdx.x * kMoePersistentStamps + i] = clock64();
  };
  stamp(0);
  if (threadIdx.x == 0) {
    s_gen0 = grid::GridGeneration(p.sync);  // before this block's first arrival
    for (int i = 0; i < S; ++i) {
      sm90::BarInit(sm90::SmemAddr(&full_bar[i]), 1);
      sm90::BarInit(sm90::SmemAddr(&empty_bar[i]), kConsumerWarps);
    }
    sm90::BarInit(sm90::SmemAddr(&route_bar), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // the last barrier of all 288 threads: the roles split here

  // The work lists (both roles walk them in the same order). Gate_up tiles t = blockIdx.x + i grid
  // over [0, ts + tr): t < ts the shared experts' (8 act columns at 8 t), then the routed slots'.
  // Down tiles blockIdx.x + i grid over hidden / 8, each its segment pairs, each pair nd stages.
  const int64_t ts = Is / 8, it = I / 8, tr = K * it, t2 = ts + tr;
  const int ng = static_cast<int>(Hd / geo.kg), nd = static_cast<int>(I / geo.kd);
  const int64_t dtiles = Hd / kDownTile;
  const int nsc = static_cast<int>(Is / I), nseg = static_cast<int>(K) + nsc, npair = (nseg + 1) / 2;
  // Segment seg of down tile n0 (routed slot seg < K, else the shared down's chunk seg - K): its
  // 8 rows' first element and row stride.
  const auto down_rows = [&](int64_t n0, int seg, const bf16*& base, int64_t& stride) {
    if (seg < K) {
      base = p.w2 + (static_cast<int64_t>(s_ids[seg]) * Hd + n0) * I;
      stride = I;
    } else {
      base = p.shared_down + n0 * Is + (seg - K) * I;
      stride = Is;
    }
  };

  if (warp == kConsumerWarps) {
    // ---- Producer warp: lane 0 issues every stage's 16 row copies into the ring: the shared
    // experts' gate_up first; then the whole warp waits for barrier 1 (every block's router
    // columns) and routes the token (the same bits in every block), and lane 0 goes on with the
    // routed slots' gate_up and the down tiles. The consumers never wait for barrier 1 (they need
    // no ids: a tile's act slot follows from its index).
    if (!work) return;
    int n = 0;
    const auto issue = [&](const StageSrc& src, int kst, int row_bytes) {
      const int slot = n % S;
      if (n >= S) {
        while (!sm90::BarTryWait(sm90::SmemAddr(&empty_bar[slot]), ((n / S) - 1) & 1)) {
        }
      }
      const uint32_t fb = sm90::SmemAddr(&full_bar[slot]);
      const uint32_t dst = sm90::SmemAddr(ring + int64_t{slot} * geo.slot);
      const uint32_t bytes = 2u * static_cast<uint32_t>(kst);
      sm90::BarExpectTx(fb, kRows * bytes);
      for (int r = 0; r < 8; ++r) sm90::BulkG2S(dst + r * row_bytes, src.a + r * src.sa, bytes, fb);
      for (int r = 0; r < 8; ++r) sm90::BulkG2S(dst + (8 + r) * row_bytes, src.b + r * src.sb, bytes, fb);
      ++n;
    };
    const auto gate_up = [&](int64_t t) {
      const bf16* base;
      int64_t c0, half;
      if (t < ts) {
        base = p.shared_gu;
        c0 = 8 * t;
        half = Is;
      } else {
        const int64_t j = (t - ts) / it;
        base = p.w13 + static_cast<int64_t>(s_ids[j]) * 2 * I * Hd;
        c0 = ((t - ts) % it) * 8;
        half = I;
      }
      for (int s = 0; s < ng; ++s)
        issue({base + c0 * Hd + int64_t{s} * geo.kg, base + (half + c0) * Hd + int64_t{s} * geo.kg, Hd, Hd}, geo.kg,
              geo.rg);
    };
    int64_t t = blockIdx.x;
    if (lane == 0)
      for (; t < ts; t += grid) gate_up(t);
    __syncwarp();
    // Barrier 1's wait (lane 0 polls; then every lane's own acquire of the bumped generation).
    if (lane == 0) {
      while (static_cast<int32_t>(grid::LdAcquire(p.sync + 1) - (s_gen0 + 1)) < 0) {
      }
    }
    __syncwarp();
    (void)grid::LdAcquire(p.sync + 1);
    MoeRoutingParams rp = p.routing;
    rp.logits = p.logits;
    rp.n = 1;
    rp.topk_ids = s_ids;
    rp.topk_weights = s_w;
    routing::RouteTokenInWarp(rp, 0, route_ws.View());
    __syncwarp();
    // Non-finite logits can leave an id out of range: expert 0 is read instead (NaN output).
    if (lane < K && (s_ids[lane] < 0 || s_ids[lane] >= E)) s_ids[lane] = 0;
    __syncwarp();
    if (blockIdx.x == 0 && lane < K) {
      p.topk_ids[lane] = s_ids[lane];
      p.topk_weights[lane] = s_w[lane];
    }
    if (lane != 0) return;
    sm90::BarArrive(sm90::SmemAddr(&route_bar));  // the consumers' combine reads s_w
    for (t = max(t, ts); t < t2; t += grid) gate_up(t);
    for (int64_t tile = blockIdx.x; tile < dtiles; tile += grid) {
      for (int pr = 0; pr < npair; ++pr) {
        const bf16 *ra, *rb;
        int64_t sa, sb;
        down_rows(tile * kDownTile, 2 * pr, ra, sa);
        down_rows(tile * kDownTile, min(2 * pr + 1, nseg - 1), rb, sb);  // an odd last pair repeats its segment
        for (int s = 0; s < nd; ++s)
          issue({ra + int64_t{s} * geo.kd, rb + int64_t{s} * geo.kd, sa, sb}, geo.kd, geo.rd);
      }
    }
    return;
  }

  // ---- Consumers (warps 0-7).
  const uint32_t gen0 = s_gen0;
  int n = 0;  // stages consumed
  const auto acquire = [&]() -> const char* {
    const int slot = n % S;
    while (!sm90::BarTryWait(sm90::SmemAddr(&full_bar[slot]), (n / S) & 1)) {
    }
    return ring + int64_t{slot} * geo.slot;
  };
  const auto release = [&] {
    __syncwarp();
    if (lane == 0) sm90::BarArrive(sm90::SmemAddr(&empty_bar[n % S]));
    ++n;
  };
  // Phase 0: the router's fp32 input and the experts' bf16 input (moe_persistent.cu's phase 0).
  if (p.attn_out) {
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < Hd; i += kCons) {
      const float v = p.attn_out[i] + p.residual[i];
      x32s[i] = v;
      ss += v * v;
    }
    const float total = ConsSum(ss, s_red);
    const float inv = rsqrtf(total / static_cast<float>(Hd) + p.eps);
    for (int64_t i = threadIdx.x; i < Hd; i += kCons) {
      const float o = x32s[i] * inv * p.post_norm_weight[i];
      x32s[i] = o;
      xs[i] = __float2bfloat16_rn(o);
    }
  } else {
    for (int64_t i = threadIdx.x; i < Hd / 8; i += kCons)
      reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(p.x16)[i];
    for (int64_t i = threadIdx.x; i < Hd; i += kCons) x32s[i] = p.x32[i];
  }
  ConsSync();

  // Phase 1: router logit columns, then barrier 1's arrival only (the producer warp waits for it
  // and routes).
  for (int64_t e = blockIdx.x; work && e < E; e += grid) {
    const float* wr = p.router_w + e * Hd;
    float acc = 0.f;
    for (int64_t k = threadIdx.x; k < Hd; k += kCons) acc = fmaf(x32s[k], __ldg(wr + k), acc);
    acc = ConsSum(acc, s_red);
    if (threadIdx.x == 0) p.logits[e] = acc;
  }
  stamp(1);
  ConsSync();
  if (threadIdx.x == 0) grid::ArriveLast(p.sync);  // barrier 1: the producer warp waits for it
  stamp(2);

  // Phase 2: gate_up + SiLU tiles (the shared experts' then the routed slots'); each stage's steps
  // split over the 8 warps, the warps' sums added in warp order by 8 threads (double-buffered by
  // tile parity: one barrier a tile).
  const int sg = geo.kg / 32;
  int buf = 0;
  for (int64_t t = blockIdx.x; work && t < t2; t += grid) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < ng; ++s) {
      const char* slot = acquire();
      const bf16* x = xs + int64_t{s} * geo.kg;
      StageDot(slot, geo.rg, x, x, sg * warp / kConsumerWarps, sg * (warp + 1) / kConsumerWarps, d);
      release();
    }
    if (q == 0) {
      s_gu[buf][warp][g][0] = d[0];
      s_gu[buf][warp][g][1] = d[2];
    }
    ConsSync();
    if (threadIdx.x < 8) {
      float gs = 0.f, us = 0.f;
      for (int w = 0; w < kConsumerWarps; ++w) {
        gs += s_gu[buf][w][threadIdx.x][0];
        us += s_gu[buf][w][threadIdx.x][1];
      }
      bf16* out;
      if (t < ts) {
        out = p.act + K * I + 8 * t;
      } else {
        const int64_t j = (t - ts) / it;
        out = p.act + j * I + ((t - ts) % it) * 8;
      }
      out[threadIdx.x] = SiluMul(gs, us);
    }
    buf ^= 1;
  }
  stamp(3);
  // Barrier 2 (the producer is already streaming the down tiles into the ring meanwhile). A block
  // arrives only once barrier 1 has completed: one with no routed tiles could otherwise count
  // into barrier 1.
  ConsSync();
  if (threadIdx.x == 0) {
    while (static_cast<int32_t>(grid::LdAcquire(p.sync + 1) - (gen0 + 1)) < 0) {
    }
    if (!grid::ArriveLast(p.sync)) {
      while (static_cast<int32_t>(grid::LdAcquire(p.sync + 1) - (gen0 + 2)) < 0) {
      }
    }
  }
  ConsSync();
  stamp(4);

  // Phase 3: down tiles of 8 output columns: each pair of segments (B columns 0 / 1) in nd
  // stages, their steps split over the warps; then 8 threads finish the columns in
  // MoeCombineNorm's order (moe_persistent.cu's phase 3).
  if (work && blockIdx.x < dtiles) {
    for (int64_t i = threadIdx.x; i < (K * I + Is) / 8; i += kCons)
      reinterpret_cast<uint4*>(xs)[i] = __ldcg(reinterpret_cast<const uint4*>(p.act) + i);
  }
  if (work) {  // the routing weights (s_w), written by the producer warp long before
    while (!sm90::BarTryWait(sm90::SmemAddr(&route_bar), 0)) {
    }
  }
  ConsSync();
  const int sd = geo.kd / 32;
  int ntile = 0;
  for (int64_t tile = blockIdx.x; work && tile < dtiles; tile += grid, ++ntile) {
    const int64_t n0 = tile * kDownTile;
    for (int pr = 0; pr < npair; ++pr) {
      const int sa = 2 * pr, sb = min(2 * pr + 1, nseg - 1);
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      for (int s = 0; s < nd; ++s) {
        const char* slot = acquire();
        const int64_t k0 = int64_t{s} * geo.kd;
        // Segment seg's activations: slot seg's act (routed), or the shared act's chunk seg - K.
        const bf16* xa = xs + (sa < K ? sa * I : K * I + (sa - K) * I) + k0;
        const bf16* xb = xs + (sb < K ? sb * I : K * I + (sb - K) * I) + k0;
        StageDot(slot, geo.rd, xa, xb, sd * warp / kConsumerWarps, sd * (warp + 1) / kConsumerWarps, d);
        release();
      }
      if (q == 0) {
        s_part[buf][pr][warp][0][g] = d[0];
        s_part[buf][pr][warp][1][g] = d[3];
      }
    }
    ConsSync();
    if (threadIdx.x < kDownTile) {
      const int c = threadIdx.x;
      const int64_t col = n0 + c;
      const auto y = [&](int seg) {
        float v = 0.f;
        for (int w = 0; w < kConsumerWarps; ++w) v += s_part[buf][seg / 2][w][seg % 2][c];
        return v;
      };
      float acc = 0.f;
      for (int sc = 0; sc < nsc; ++sc) acc += y(static_cast<int>(K) + sc);
      for (int j = 0; j < K; ++j) acc += s_w[j] * __bfloat162float(__float2bfloat16_rn(y(j)));
      float r1 = p.residual[col];
      if (p.attn_out) r1 = p.attn_out[col] + r1;
      const float v = acc + r1;
      p.residual[col] = v;
      s_vals[ntile][c] = v;
    }
    buf ^= 1;
  }
  ConsSync();
  if (threadIdx.x == 0) {
    float b = 0.f;
    for (int k = 0; k < ntile; ++k)
      for (int c = 0; c < kDownTile; ++c) b += s_vals[k][c] * s_vals[k][c];
    p.partials[blockIdx.x] = b;
  }
  stamp(5);
  ConsSync();
  if (threadIdx.x == 0 && !grid::ArriveLast(p.sync)) {
    while (static_cast<int32_t>(grid::LdAcquire(p.sync + 1) - (gen0 + 3)) < 0) {
    }
  }
  ConsSync();
  stamp(6);

  // Phase 4: the next RMSNorm of this block's columns (partials added in a fixed order).
  if (warp == 0) {
    float tot = 0.f;
    for (int b = lane; b < grid; b += 32) tot += __ldcg(p.partials + b);
    tot = dev::WarpSum(tot);
    if (lane == 0) s_total = tot;
  }
  ConsSync();
  const float inv = rsqrtf(s_total / static_cast<float>(Hd) + p.eps);
  if (work && threadIdx.x < kDownTile) {
    int k = 0;
    for (int64_t tile = blockIdx.x; tile < dtiles; tile += grid, ++k) {
      const int64_t col = tile * kDownTile + threadIdx.x;
      const float o = s_vals[k][threadIdx.x] * inv * p.norm_weight[col];
      p.out32[col] = o;
      if (p.out16) p.out16[col] = __float2bfloat16_rn(o);
    }
  }
  stamp(7);
}

}  // namespace

const char* PipeUnsupported(const MoePersistentParams& p) {
  const Geom geo = MakeGeom(p.hidden, p.inter, p.top_k, p.shared_inter, p.pipe_max_stages, p.pipe_stage_k);
  if (geo.kg == 0 || geo.kd == 0) return "hidden or I has no stage K (a multiple of 32 dividing it, at most the stage K limit)";
  if (!geo.Ok()) return "activations leave the stage ring fewer than 2 stages of shared memory";
  static std::mutex mu;
  static auto* known = new std::map<std::tuple<int, int64_t, int>, bool>();
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  // The carveout the launch runs at (the measurement knob's, applied at launch, else the
  // kernel's own): it changes whether a block fits.
  const int carveout = LaunchCarveout() >= -1 ? LaunchCarveout() : p.smem_carveout;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, geo.DynSmem(), carveout);
  auto it = known->find(key);
  if (it == known->end()) {
    int coop = 0;
    DS_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    bool fits = coop != 0;
    if (fits) {
      if (carveout >= -1) SetPreferredCarveout(reinterpret_cast<const void*>(MoePipeKernel), carveout);
      EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MoePipeKernel), static_cast<int>(geo.DynSmem()));
      int per_sm = 0;
      DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, MoePipeKernel, kThreads, geo.DynSmem()));
      fits = per_sm >= 1;
    }
    it = known->emplace(key, fits).first;
  }
  return it->second ? "" : "one block with the stage ring does not fit an SM (or no cooperative launch)";
}

const void* PipeKernel() { return reinterpret_cast<const void*>(MoePipeKernel); }

void LaunchPipe(const MoePersistentParams& p) {
  const Geom geo = MakeGeom(p.hidden, p.inter, p.top_k, p.shared_inter, p.pipe_max_stages, p.pipe_stage_k);
  LaunchCooperative(MoePipeKernel, dim3(static_cast<unsigned>(MoePersistentGridBlocks(1))), dim3(kThreads),
                    static_cast<size_t>(geo.DynSmem()), p.stream, p);
}

}  // namespace ds::cuda::moe_pipe
