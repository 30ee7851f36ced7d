#include "backend/cuda/moe_ring.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/grid_barrier.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/moe_tagged.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "backend/cuda/tensor_map.h"
#include "common/check.h"

namespace ds::cuda {
namespace {

using bf16 = __nv_bfloat16;

// DeepSeek-V2-Lite's MoE shapes (moe_ring.h).
constexpr int kHd = 2048, kE = 64, kK = 6, kI = 1408, kIs = 2816;
constexpr int kTilesR = kK * kI / 8, kTs = kIs / 8, kTiles = kTilesR + kTs;  // gate_up tiles: 1056 routed, 352 shared
constexpr int kDtiles = kHd / 16;                                            // down tiles of 16 output columns
constexpr int kNseg = kK + kIs / kI;                                         // down segments: 6 routed + 2 shared chunks
static_assert(kNseg == 8, "one segment a warp");
constexpr int kCw = 8, kCt = 32 * kCw;  // consumer warps / threads

// 6 x 32 KB + act (22 KB) + the kernel's 13 KB of static shared memory: 227 KB, an H100 / H200 block's
// most (a static byte more and 6 stages no longer fit: CudaMoeRing.RejectsUnsupported checks).
constexpr int kMaxStages = 6;
constexpr int kStageBytes = 32 * 1024;  // 8 warp slices of 4 KB
constexpr int kBox = 128;               // columns of a box
constexpr int kHalfK = kI / 2;          // MoePersistent's two K ranges of a down segment: [0, 704), [704, 1408)
constexpr int kDnStages = kI / kBox;    // 11 stages a down tile
static_assert(kI % kBox == 0 && kHalfK % 32 == 0, "down stages of 128 columns, the K ranges split at a 32-step");
static_assert(kHd / kCw == 2 * kBox, "a gate_up warp slice: 2 stages of 128 columns");
constexpr int kMaxRounds = 16;                    // gate_up rounds a block (grid >= 88)
static_assert(kTiles / kMaxRounds >= kE, "grid >= 88 >= E: every router logit has a block of its own");
constexpr int kXsElems = kK * kI + kIs;           // act (bf16), >= hidden (x16 before)
constexpr size_t kTailBytes = sizeof(bf16) * kXsElems;  // xs
static_assert(kXsElems / 2 == kMoeRingActWords, "the tagged act words: two act values a word");
constexpr int kSegWords = kI / 2 / 32;            // a segment's tagged act words a lane (22)
static_assert(kSegWords <= 32 && kBox / 2 == 2 * 32, "a lane's words in one mask; a down stage's act: two words a lane");

// The dense form (kDense; MoeRingForm::dense, session 34): DeepSeek-V2-Lite's first_k_dense layer, its MLP
// (I 10,944) as the gate_up tiles' "shared" weights: 1,368 tiles of 8 act columns, no router, no routing. A
// down tile's K (10,944) is 86 chunks of 128 columns (the last 64 wide), chunk 8 ds + w warp w's part of stage
// ds (stage 10: warps 0-5, warp 5's chunk half), each warp's sum over its chunks in order, the warps' sums in
// warp order: its own fp32 order (not MoePersistent's dense form's: bounded, not bit-identical).
constexpr int kIsD = 10944, kTilesD = kIsD / 8, kChunksD = (kIsD + kBox - 1) / kBox;  // 1,368 tiles, 86 chunks
static_assert(kIsD <= kXsElems && kChunksD <= kCw * kDnStages && kTilesD <= kMaxRounds * 88, "the dense form fits");
static_assert(kIsD % 64 == 0 && (kIsD % kBox) % 32 == 0, "the last chunk: whole 32-column steps, whole words a lane");
static_assert(kCw * kDnStages * kBox / 2 <= kMoeRingActWords, "every dense word slot a lane polls lies in act_tagged");
// kDense: the word offset of a lane's act word u (u < kSegWords: stage u / 2, half u % 2): its segment's u-th
// 32-word row (MoE), or chunk 8 (u / 2) + warp's half u % 2 (dense; from the warp's first chunk).
template <bool kDense>
__device__ __forceinline__ int WordOff(int u) {
  return kDense ? (kCw * kBox / 2) * (u >> 1) + 32 * (u & 1) : 32 * u;
}
// Dense: bit u set where the warp's word u lies past the act (chunks >= 86, the last chunk's second half).
__device__ __forceinline__ uint32_t DenseAbsentWords(int warp) {
  uint32_t m = 0;
  for (int u = 0; u < kSegWords; ++u) {
    const int chunk = kCw * (u >> 1) + warp, col = chunk * kBox + 64 * (u & 1);
    if (col >= kIsD) m |= 1u << u;
  }
  return m;
}

constexpr int kConsumerBar = 1;  // named barrier of the 8 consumer warps
__device__ __forceinline__ void ConsumerSync() { sm90::NamedBarSync(kConsumerBar, kCt); }
// dev::BlockSum over the 256 consumer threads (the same butterfly and order as BlockSum in a
// 256-thread block: MoePersistent's bits).
__device__ __forceinline__ float ConsumerSum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = dev::WarpSum(v);
  ConsumerSync();
  if (lane == 0) red[warp] = v;
  ConsumerSync();
  const float r = lane < kCw ? red[lane] : 0.f;
  return dev::WarpSum(r);
}

__device__ __forceinline__ void WaitParity(uint32_t bar, uint32_t parity) {
  while (!sm90::BarTryWait(bar, parity)) {
  }
}

// kTagAct: the lane's tagged act words of one segment (w[32 u], u < kSegWords; w the lane's first
// word): LoadTaggedAct issues the loads of those not yet in `have` together (v[u] 0 for the
// others), CommitTaggedAct puts those of v that carry `tag` into xs_seg (the segment's act, bf16
// pairs at 2 (lane + 32 u)) and marks them in `have`.
template <bool kDense = false>
__device__ __forceinline__ void LoadTaggedAct(const uint64_t* w, uint32_t have, uint64_t (&v)[kSegWords]) {
#pragma unroll
  for (int u = 0; u < kSegWords; ++u) v[u] = (have >> u & 1u) ? 0 : moe_dev::LdTaggedWord(w + WordOff<kDense>(u));
}
// One word u of the lane's (dst: the lane's first pair in the segment's act).
template <bool kDense = false>
__device__ __forceinline__ void CommitTaggedWord(int u, uint64_t v, uint32_t tag, uint32_t* dst, uint32_t& have) {
  if (!(have >> u & 1u) && static_cast<uint32_t>(v >> 32) == tag) {
    dst[WordOff<kDense>(u)] = static_cast<uint32_t>(v);
    have |= 1u << u;
  }
}
template <bool kDense = false>
__device__ __forceinline__ void CommitTaggedAct(const uint64_t (&v)[kSegWords], uint32_t tag, bf16* xs_seg,
                                                uint32_t& have) {
  uint32_t* dst = reinterpret_cast<uint32_t*>(xs_seg) + (threadIdx.x & 31);
#pragma unroll
  for (int u = 0; u < kSegWords; ++u) CommitTaggedWord<kDense>(u, v[u], tag, dst, have);
}

// act's offset of gate_up tile t's first value: the routed slot's segment, then the shared chunks.
__device__ __forceinline__ int ActOffset(int t) {
  return t < kTilesR ? (t / (kI / 8)) * kI + (t % (kI / 8)) * 8 : kK * kI + (t - kTilesR) * 8;
}

// kChunkMajor (the act_tagged form): the routed tiles chunk by chunk of 128 act columns (a down
// stage's), the 6 slots' 16 tiles of chunk 0, then chunk 1's, ..., so that the last rounds make the
// last down stages' act and a block's first down stages wait for rounds long done. The tiles'
// values do not depend on which block makes them, nor on when.
static_assert(kTilesR % (kK * kBox / 8) == 0, "the routed tiles: whole chunks of the 6 slots");
template <bool kChunkMajor>
__device__ __forceinline__ int TileOf(int i) {
  if (i < kTs) return kTilesR + i;
  const int j = i - kTs;
  if constexpr (!kChunkMajor) return j;
  constexpr int kPerChunk = kBox / 8, kSlotTiles = kI / 8;  // 16 tiles of 8 rows a chunk of a slot; 176 a slot
  const int chunk = j / (kK * kPerChunk), within = j % (kK * kPerChunk);
  return (within / kPerChunk) * kSlotTiles + chunk * kPerChunk + within % kPerChunk;
}

// The ring's stage sequence, shared by producers and consumers: stage k of a slot `slot`, the
// slot's use count `use` (its barriers' phase parity).
struct RingPos {
  int slot = 0;
  uint32_t use = 0;
  __device__ __forceinline__ void Next(int stages) {
    if (++slot == stages) { slot = 0; ++use; }
  }
};

// Warps: kCw consumers, kP producers, one routing warp. kTagAct (MoeRingForm::act_tagged): act
// through act_tagged's words and no grid barrier (moe_ring.h).
template <int kP, bool kTagAct, bool kDense>
__global__ void __launch_bounds__(32 * (kCw + kP + 1), 1)
    MoeRingKernel(const __grid_constant__ MoeRingMaps maps, MoePersistentParams p, int stages, int early, bool warm,
                  bool evict_first, uint64_t* act_tagged, bool act_lookahead) {
  static_assert(kTagAct || !kDense, "the dense form only with act_tagged");
  extern __shared__ __align__(1024) unsigned char ring[];
  bf16* xs = reinterpret_cast<bf16*>(ring + static_cast<size_t>(stages) * kStageBytes);  // x16 [hidden], then act
  __shared__ __align__(8) uint64_t full[kMaxStages], empty[kMaxStages], routed_bar, go_bar;
  __shared__ routing::WarpRouteScratch route_ws;
  __shared__ int32_t s_ids[kK];
  __shared__ float s_w[kK];
  __shared__ float s_gu[kMaxRounds][kCw][16];  // the gate_up parts' gate / up sums
  __shared__ float s_part[kNseg][2][16];       // the down segments' sums over each K range
  __shared__ float s_red[32];
  __shared__ uint64_t s_base;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  // Measurement only (moe_ring.h, MoeRing's stamps): %globaltimer (ns) at the points listed there;
  // stamps at b * kMoePersistentStamps + i, tile_stamps at b * kMoePersistentTileStamps + i.
  const auto stamp = [&](long long* at, int i) {
    if (at != nullptr)
      at[b * (at == p.tile_stamps ? kMoePersistentTileStamps : kMoePersistentStamps) + i] =
          static_cast<long long>(dev::GlobalTimerNs());
  };
  if (threadIdx.x == 0) {
    stamp(p.stamps, 0);
    s_base = grid::GridBase(p.sync);  // no barrier of this launch has completed yet
    for (int s = 0; s < stages; ++s) {
      sm90::BarInit(sm90::SmemAddr(&full[s]), kP);
      sm90::BarInit(sm90::SmemAddr(&empty[s]), kCw);
    }
    sm90::BarInit(sm90::SmemAddr(&routed_bar), 1);
    sm90::BarInit(sm90::SmemAddr(&go_bar), warm && !kDense ? 2 : 1);  // the consumers' loads out (and the warm routing)
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const uint32_t epoch = static_cast<uint32_t>(s_base / grid::kGridEpoch) + 1u;  // the tagged words' tag
  if (warp == kCw + kP) {
    if constexpr (kDense) {  // no routing: the producers and the consumers go on at once
      if (lane == 0) sm90::BarArrive(sm90::SmemAddr(&routed_bar));
      return;
    }
    // The routing warp: as soon as the router blocks' tagged logits are in, the ids into s_ids
    // (for the producers, which wait for them before the first routed stage) and the weights into
    // s_w (for the combine; the consumers wait for routed_bar before they read them).
    MoeRoutingParams rp = p.routing;
    rp.logits = p.logits;
    rp.n = 1;
    rp.topk_ids = s_ids;
    rp.topk_weights = s_w;
    uint64_t tag_w0 = 0, tag_w1 = 0;
    moe_dev::LdTagged(p.router_tagged, kE, tag_w0, tag_w1);
    // warm (MoeRingForm::warm_route): a first pass of the same code on made-up logits before the
    // producers start, so that its instructions are fetched while the memory system is idle, not
    // from behind the weight stream (the real pass overwrites s_ids / s_w).
#pragma unroll 1
    for (int pass = warm ? 0 : 1; pass < 2; ++pass) {
      float x[2] = {-static_cast<float>(lane), -static_cast<float>(lane + 32)};
      if (pass == 1) {
        moe_dev::PollTagged(p.router_tagged, kE, epoch, tag_w0, tag_w1, x);
        if (lane == 0) stamp(p.tile_stamps, 4);
      }
      routing::RouteTokenInWarp<2, true>(rp, 0, route_ws.View(), x);
      __syncwarp();
      if (pass == 0 && lane == 0) sm90::BarArrive(sm90::SmemAddr(&go_bar));
    }
    if (lane < kK && (s_ids[lane] < 0 || s_ids[lane] >= kE)) s_ids[lane] = 0;  // defensive (MoePersistent's clamp)
    __syncwarp();
    if (lane == 0) {
      sm90::BarArrive(sm90::SmemAddr(&routed_bar));
      stamp(p.stamps, 2);
    }
    if (b == 0 && lane < kK) {
      p.topk_ids[lane] = s_ids[lane];
      p.topk_weights[lane] = s_w[lane];
    }
    return;
  }
  if (warp >= kCw) {
    // Producer j (lane 0): the block's stages in order; boxes of consumer warps w = j, j + kP, ...
    // It starts once the consumers' first loads (phase 0's, the router's) have gone out, ahead
    // of the weight stream in the memory system's queues.
    if (lane != 0) return;
    const int j = warp - kCw;
    WaitParity(sm90::SmemAddr(&go_bar), 0);
    const uint64_t policy = sm90::EvictFirstPolicy();
    const auto tma2d = [&](uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
      if (evict_first) sm90::TmaLoad2dHint(dst, map, c0, c1, bar, policy);
      else sm90::TmaLoad2d(dst, map, c0, c1, bar);
    };
    const auto tma3d = [&](uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
      if (evict_first) sm90::TmaLoad3dHint(dst, map, c0, c1, c2, bar, policy);
      else sm90::TmaLoad3d(dst, map, c0, c1, c2, bar);
    };
    RingPos pos;
    int k = 0;
    // Stages in flight: `early` until the routing is seen, then `stages` (stage k waits for the
    // consumers' release of stage k - depth; slots are released in order).
    bool routing_seen = false;
    const auto acquire = [&](uint32_t bytes) {  // the next slot empty; its full barrier told of `bytes`
      for (;;) {  // (re-checked while it waits: the routing raises the depth)
        routing_seen = routing_seen || sm90::BarTestWait(sm90::SmemAddr(&routed_bar), 0);
        const int depth = routing_seen ? stages : early;
        if (k < depth) break;
        const uint32_t e = sm90::SmemAddr(&empty[(k - depth) % stages]), parity = static_cast<uint32_t>((k - depth) / stages) & 1u;
        if (routing_seen ? (WaitParity(e, parity), true) : sm90::BarTryWait(e, parity)) break;
      }
      const uint32_t bar = sm90::SmemAddr(&full[pos.slot]);
      sm90::BarExpectTx(bar, bytes);
      return bar;
    };
    constexpr uint32_t kBoxesPer = kCw / kP;
    bool routed = false;
    for (int i = b; i < (kDense ? kTilesD : kTiles); i += grid) {
      if (!kDense && !routed && i >= kTs) {
        WaitParity(sm90::SmemAddr(&routed_bar), 0);
        routed = true;
        if (j == 0) stamp(p.tile_stamps, 0);
      }
      const int t = kDense ? i : TileOf<kTagAct>(i);
      const bool shared = kDense || t >= kTilesR;
      const CUtensorMap* map = shared ? &maps.sgu : &maps.gu;
      const int c0 = kDense ? t * 8 : shared ? (t - kTilesR) * 8 : (t % (kI / 8)) * 8;
      const int half0 = shared ? 0 : 2 * s_ids[t / (kI / 8)];
      for (int h = 0; h < 2; ++h) {
        const uint32_t bar = acquire(kBoxesPer * 4096u);
        const uint32_t base = sm90::SmemAddr(ring + pos.slot * kStageBytes);
        for (int w = j; w < kCw; w += kP) tma3d(base + w * 4096, map, 2 * kBox * w + kBox * h, c0, half0, bar);
        pos.Next(stages);
        ++k;
      }
    }
    if (!routed) WaitParity(sm90::SmemAddr(&routed_bar), 0);
    if (j == 0) stamp(p.tile_stamps, 1);
    // Down tiles grid - 1 - b, then + grid: warp w's box is segment w's 16 rows x 128 columns.
    for (int tile = grid - 1 - b; tile < kDtiles; tile += grid) {
      const int n0 = tile * 16;
      for (int ds = 0; ds < kDnStages; ++ds) {
        const uint32_t bar = acquire(kBoxesPer * 4096u);
        const uint32_t base = sm90::SmemAddr(ring + pos.slot * kStageBytes);
        for (int w = j; w < kCw; w += kP) {
          if (kDense) tma2d(base + w * 4096, &maps.sdn, kBox * min(kCw * ds + w, kChunksD - 1), n0, bar);  // (past: unused)
          else if (w < kK) tma2d(base + w * 4096, &maps.dn, kBox * ds, s_ids[w] * kHd + n0, bar);
          else tma2d(base + w * 4096, &maps.sdn, (w - kK) * kI + kBox * ds, n0, bar);
        }
        pos.Next(stages);
        ++k;
      }
    }
    if (j == 0) stamp(p.tile_stamps, 2);
    return;
  }

  // The consumers (threads 0..255): MoePersistent's runner-form math, phase by phase.
  const int tid = threadIdx.x;
  // Phase 0: x = rmsnorm(residual + attn_out) * post_norm_weight (xs bf16), and phase 1: router
  // logit b (blocks < E; grid >= E): thread t takes k = t, t + 256, ..., then the sum. Every load
  // first, into registers; then the producers may start.
  constexpr int kPer = kHd / kCt;
  static_assert(kHd % kCt == 0, "hidden a multiple of the consumer threads");
  float ao[kPer], re[kPer], pw[kPer], rw[kPer];
  const bool router = !kDense && b < kE;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    ao[u] = p.attn_out[tid + u * kCt];
    re[u] = p.residual[tid + u * kCt];
    pw[u] = p.post_norm_weight[tid + u * kCt];
    rw[u] = router ? __ldg(p.router_w + static_cast<int64_t>(b) * kHd + tid + u * kCt) : 0.f;
  }
  ConsumerSync();
  if (tid == 0) sm90::BarArrive(sm90::SmemAddr(&go_bar));
  {
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      ao[u] = ao[u] + re[u];  // v = attn_out + residual
      ss += ao[u] * ao[u];
    }
    const float total = ConsumerSum(ss, s_red);
    const float inv = rsqrtf(total / static_cast<float>(kHd) + p.eps);
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const float o = ao[u] * inv * pw[u];
      xs[tid + u * kCt] = __float2bfloat16_rn(o);
      acc = fmaf(o, rw[u], acc);
    }
    if (router) {
      acc = ConsumerSum(acc, s_red);
      if (tid == 0) {
        p.logits[b] = acc;
        moe_dev::StTagged(p.router_tagged + b, epoch, acc);
      }
    }
  }
  ConsumerSync();
  const uint64_t base = s_base;
  if (tid == 0) stamp(p.stamps, 1);

  // Phase 2: gate_up tiles i = b, b + grid, ...: warp w the K eighth w of each (two stages).
  RingPos pos;
  const auto wait_full = [&]() { WaitParity(sm90::SmemAddr(&full[pos.slot]), pos.use & 1u); };
  const auto release = [&]() {
    __syncwarp();
    if (lane == 0) sm90::BarArrive(sm90::SmemAddr(&empty[pos.slot]));
    pos.Next(stages);
  };
  const int tile0 = grid - 1 - b;  // the block's first down tile (none: >= kDtiles)
  // kTagAct: the lane's act words (segment `warp`: word lane + 32 u, u < kSegWords; chunk c of 128
  // act values, a down stage's, is u = 2 c and 2 c + 1), `have` those in xs (bit u).
  // kDense: the warp's chunks w, w + 8, ... (WordOff), the words past the act marked had.
  const uint64_t* aw = kTagAct ? act_tagged + (kDense ? (kBox / 2) * warp : warp * (kI / 2)) + lane : nullptr;
  bf16* const xs_act = xs + (kDense ? kBox : kI) * warp;  // the warp's act in xs (dense: its first chunk)
  uint32_t have = kDense ? DenseAbsentWords(warp) : 0u;
  int r = 0;
  for (int i = b; i < (kDense ? kTilesD : kTiles); i += grid, ++r) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    for (int h = 0; h < 2; ++h) {
      wait_full();
      if (tid == 0 && h == 0 && i >= kTs && i < kTs + grid) stamp(p.stamps, 3);  // the first routed stage in
      // [2][8][128] bf16: gate row g at g * 256 bytes, up row g at 2048 + g * 256.
      const unsigned char* slice = ring + pos.slot * kStageBytes + warp * 4096;
      const uint4* x4 = reinterpret_cast<const uint4*>(xs + 2 * kBox * warp + kBox * h) + q;
#pragma unroll
      for (int s = 0; s < kBox / 32; ++s) {
        const uint4 va = *reinterpret_cast<const uint4*>(slice + g * 256 + s * 64 + q * 16);
        const uint4 vb = *reinterpret_cast<const uint4*>(slice + 2048 + g * 256 + s * 64 + q * 16);
        const uint4 xv = x4[4 * s];
        ptx::Mma(d, va.x, vb.x, va.y, vb.y, xv.x, xv.y);
        ptx::Mma(d, va.z, vb.z, va.w, vb.w, xv.z, xv.w);
      }
      release();
    }
    if (q == 0) {
      s_gu[r][warp][g] = d[0];
      s_gu[r][warp][8 + g] = d[2];
    }
  }
  if (tid == 0) stamp(p.stamps, 4);
  ConsumerSync();
  float r1_first = 0.f;
  if constexpr (kTagAct) {
    // act = SiLU(gate) * up (MoePersistent's order, as below), two values a thread: into act and,
    // with the launch's tag, into act_tagged; then the grid counter's arrival alone (the next
    // launch's base). No barrier: a warp's down stage waits for its own 128 act values' words.
    for (int idx = tid; idx < r * 4; idx += kCt) {
      const int rr = idx / 4, c = 2 * (idx % 4), t = kDense ? b + grid * rr : TileOf<kTagAct>(b + grid * rr);
      float gs0 = 0.f, us0 = 0.f, gs1 = 0.f, us1 = 0.f;
      for (int pp = 0; pp < kCw; ++pp) {
        gs0 += s_gu[rr][pp][c];
        us0 += s_gu[rr][pp][8 + c];
        gs1 += s_gu[rr][pp][c + 1];
        us1 += s_gu[rr][pp][8 + c + 1];
      }
      const int off = (kDense ? t * 8 : ActOffset(t)) + c;
      const __nv_bfloat162 pair(moe_dev::SiluMul(gs0, us0), moe_dev::SiluMul(gs1, us1));
      *reinterpret_cast<__nv_bfloat162*>(p.act + off) = pair;
      moe_dev::StTaggedBits(act_tagged + off / 2, epoch, *reinterpret_cast<const uint32_t*>(&pair));
    }
    if (tid == 0) {
      grid::GridArriveNoWait(p.sync, b, grid);
      stamp(p.stamps, 5);
    }
    if (tid < 16 && tile0 < kDtiles) r1_first = p.attn_out[tile0 * 16 + tid] + p.residual[tile0 * 16 + tid];
    if (tile0 < kDtiles) {  // every word the lane has, at once (x16 no longer read: past the consumers' sync)
      uint64_t v[kSegWords];
      LoadTaggedAct<kDense>(aw, kDense ? have : 0u, v);
      CommitTaggedAct<kDense>(v, epoch, xs_act, have);
    } else if (tid == 0) {
      stamp(p.stamps, 6);  // (no down tile)
    }
    WaitParity(sm90::SmemAddr(&routed_bar), 0);  // s_w (the routing warp's) readable
  } else {
  // act = SiLU(gate) * up of each tile's parts summed in part order (MoePersistent's order).
  for (int idx = tid; idx < r * 8; idx += kCt) {
    const int rr = idx / 8, c = idx % 8, t = TileOf<kTagAct>(b + grid * rr);
    float gs = 0.f, us = 0.f;
    for (int pp = 0; pp < kCw; ++pp) {
      gs += s_gu[rr][pp][c];
      us += s_gu[rr][pp][8 + c];
    }
    p.act[ActOffset(t) + c] = moe_dev::SiluMul(gs, us);
  }
  // The grid barrier (the launch's only one, the consumers' alone: grid_barrier.cuh's protocol).
  ConsumerSync();
  if (tid == 0) {
    grid::GridArriveAndWait(p.sync, base + static_cast<uint64_t>(grid), /*final=*/true);
    stamp(p.stamps, 5);
  }
  ConsumerSync();

  // Phase 3's first tile's r1 (residual + attn_out) and act into shared memory.
  if (tid < 16 && tile0 < kDtiles) r1_first = p.attn_out[tile0 * 16 + tid] + p.residual[tile0 * 16 + tid];
  {
    constexpr int kN8 = kXsElems / 8, kBatch = 8;
    const uint4* src = reinterpret_cast<const uint4*>(p.act);
    uint4* dst = reinterpret_cast<uint4*>(xs);
    for (int i0 = tid; i0 < kN8; i0 += kBatch * kCt) {
      uint4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (i0 + u * kCt < kN8) v[u] = __ldcg(src + i0 + u * kCt);
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (i0 + u * kCt < kN8) dst[i0 + u * kCt] = v[u];
    }
  }
  WaitParity(sm90::SmemAddr(&routed_bar), 0);  // s_w (the routing warp's) readable
  ConsumerSync();
  if (tid == 0) stamp(p.stamps, 6);
  }
  // Phase 3: down tiles of 16 output columns (grid - 1 - b, then + grid); warp w is segment w (routed slot w <
  // top_k, then the shared experts' down chunks of I) over both of MoePersistent's K ranges, summed
  // apart (d0 the first 704 columns, d1 the rest) in its step order: rows g and g + 8 of the mma
  // tile are the segment's output columns n0 + g and n0 + 8 + g, every B column its act.
  const uint4* xw = reinterpret_cast<const uint4*>(xs_act) + q;  // segment w's act (lane's 8 at 8 q; dense: chunk w's)
  bool first = true;
  // kTagAct with act_lookahead: chunk c's two words loaded at stage c - 2 where the lane still
  // lacked them (bit c of `ahead`), into the slot of c's parity, and committed at stage c.
  uint64_t la_e0 = 0, la_e1 = 0, la_o0 = 0, la_o1 = 0;
  uint32_t ahead = 0;
  const auto commit_chunk = [&](int c, uint64_t v0, uint64_t v1) {
    uint32_t* dst = reinterpret_cast<uint32_t*>(xs_act) + lane;
    CommitTaggedWord<kDense>(2 * c, v0, epoch, dst, have);
    CommitTaggedWord<kDense>(2 * c + 1, v1, epoch, dst, have);
  };
  for (int tile = tile0; tile < kDtiles; tile += grid) {
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
    // One stage: steps s < split into da, the rest into db. (Three rolled loops, not one unrolled
    // one: a tenth of the code, fetched while the weight stream fills the memory system's queues.)
    const auto stage = [&](int ds, float(&da)[4], float(&db)[4], auto split) {
      if constexpr (kTagAct) {
        if (first) {  // stage ds's act (words 2 ds and 2 ds + 1 of each lane) in xs
          const uint32_t need = 3u << (2 * ds);
          if ((have & need) != need && (ahead >> ds & 1u))
            commit_chunk(ds, ds & 1 ? la_o0 : la_e0, ds & 1 ? la_o1 : la_e1);
          while (!__all_sync(0xffffffffu, (have & need) == need)) {
            uint64_t v[kSegWords];
            LoadTaggedAct<kDense>(aw, have, v);
            CommitTaggedAct<kDense>(v, epoch, xs_act, have);
          }
          __syncwarp();
          if (tid == 0 && ds == 0) stamp(p.stamps, 6);
          const int c = ds + 2;
          const uint32_t cmask = 3u << (2 * c);
          if (act_lookahead && c < kDnStages && (have & cmask) != cmask) {
            const uint64_t v0 = moe_dev::LdTaggedWord(aw + WordOff<kDense>(2 * c)),
                           v1 = moe_dev::LdTaggedWord(aw + WordOff<kDense>(2 * c + 1));
            if (c & 1) { la_o0 = v0; la_o1 = v1; } else { la_e0 = v0; la_e1 = v1; }
            ahead |= 1u << c;
          }
        }
      }
      wait_full();
      if (tid == 0 && ds == 0 && first) stamp(p.tile_stamps, 3);  // the first down stage in
      // [16 rows][128] bf16: row g at g * 256 bytes, row g + 8 at 2048 + g * 256.
      const unsigned char* slice = ring + pos.slot * kStageBytes + warp * 4096;
#pragma unroll
      for (int s = 0; s < kBox / 32; ++s) {
        const uint4 va = *reinterpret_cast<const uint4*>(slice + g * 256 + s * 64 + q * 16);
        const uint4 vb = *reinterpret_cast<const uint4*>(slice + 2048 + g * 256 + s * 64 + q * 16);
        const uint4 xv = xw[(kDense ? kCw * kBox / 8 : kBox / 8) * ds + 4 * s];
        float(&d)[4] = s < decltype(split)::value ? da : db;
        if (!kDense || (kCw * ds + warp) * kBox + 32 * s < kIsD) {  // (dense: past the act, no step)
          ptx::Mma(d, va.x, vb.x, va.y, vb.y, xv.x, xv.y);
          ptx::Mma(d, va.z, vb.z, va.w, vb.w, xv.z, xv.w);
        }
      }
      release();
    };
    constexpr int kSplitStage = kHalfK / kBox, kSplitStep = kHalfK % kBox / 32;  // stage 5, step 2
#pragma unroll 1
    for (int ds = 0; ds < kSplitStage; ++ds) stage(ds, d0, d0, std::integral_constant<int, 4>{});
    stage(kSplitStage, d0, d1, std::integral_constant<int, kSplitStep>{});
#pragma unroll 1
    for (int ds = kSplitStage + 1; ds < kDnStages; ++ds) stage(ds, d1, d1, std::integral_constant<int, 4>{});
    if (q == 0) {
      s_part[warp][0][g] = d0[0];
      s_part[warp][0][8 + g] = d0[2];
      s_part[warp][1][g] = d1[0];
      s_part[warp][1][8 + g] = d1[2];
    }
    ConsumerSync();
    if (tid < 16) {  // moe = the shared chunks' y in order + sum_j w_j bf16(y_j); residual += moe
      const int c = tid, n = tile * 16 + c;
      const auto y = [&](int seg) {
        float v = 0.f;
        for (int rr = 0; rr < 2; ++rr) v += s_part[seg][rr][c];
        return v;
      };
      float acc = 0.f;
      if constexpr (kDense) {  // the warps' sums in warp order
        for (int sc = 0; sc < kNseg; ++sc) acc += y(sc);
      } else {
        for (int sc = kK; sc < kNseg; ++sc) acc += y(sc);
        for (int jj = 0; jj < kK; ++jj) acc += s_w[jj] * __bfloat162float(__float2bfloat16_rn(y(jj)));
      }
      const float r1 = first ? r1_first : p.attn_out[n] + p.residual[n];
      p.residual[n] = acc + r1;
    }
    first = false;
    ConsumerSync();
  }
  if (tid == 0) stamp(p.stamps, 7);
}

using KernelFn = void (*)(MoeRingMaps, MoePersistentParams, int, int, bool, bool, uint64_t*, bool);
template <bool kTagAct, bool kDense>
KernelFn KernelFor(int producers) {
  return producers == 4   ? MoeRingKernel<4, kTagAct, kDense>
         : producers == 2 ? MoeRingKernel<2, kTagAct, kDense>
                          : MoeRingKernel<1, kTagAct, kDense>;
}
KernelFn KernelFor(int producers, bool act_tagged, bool dense) {
  return dense ? KernelFor<true, true>(producers) : act_tagged ? KernelFor<true, false>(producers) : KernelFor<false, false>(producers);
}
// The dense form's params: a layer without routed experts (moe_ring.h).
bool IsDense(const MoePersistentParams& p) { return p.num_experts == 0 && p.top_k == 0; }

size_t SmemBytes(int stages) { return static_cast<size_t>(stages) * kStageBytes + kTailBytes; }

CUtensorMap Encode(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box) {
  CUtensorMap map{};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = TensorMapEncodeFn()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims, strides,
                                         box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DS_CHECK(r == CUDA_SUCCESS) << "MoeRingMakeMaps: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ")";
  return map;
}

// The device's side of MoeRingUnsupported for `form` (cooperative launch, sm_90, the SM count the
// schedule needs, one block a SM with the ring's shared memory), cached per (device, form) under a
// mutex (runners on several devices may ask from several threads).
std::string DeviceVerdict(const MoeRingForm& form, bool dense) {
  static std::mutex mu;
  static auto* known = new std::map<std::tuple<int, int, int, bool, bool>, std::string>();
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, form.stages, form.producers, form.act_tagged, dense);
  if (const auto it = known->find(key); it != known->end()) return it->second;
  std::ostringstream why;
  const DeviceProps& dp = CurrentDeviceProps();
  int coop = 0, cc_major = 0;
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  if (!coop) why << "the device has no cooperative launch; ";
  if (cc_major != 9) why << "needs sm_90a (this build's only target; TMA); ";
  if (dp.sms * kMaxRounds < kTiles) why << dp.sms << " SMs (the schedule needs at least 88); ";
  if (why.str().empty()) {
    const size_t smem = SmemBytes(form.stages);
    const KernelFn kernel = KernelFor(form.producers, form.act_tagged, dense);
    // The fit by arithmetic (not an occupancy query, which may follow the kernel's preferred
    // carveout of the moment, set by MoeRing for another stage count).
    cudaFuncAttributes attr{};
    DS_CUDA_CHECK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel)));
    int per_sm = 0, per_block = 0, reserve = 0;
    DS_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    DS_CUDA_CHECK(cudaDeviceGetAttribute(&reserve, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    DS_CUDA_CHECK(cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const size_t need = smem + attr.sharedSizeBytes;
    if (need > static_cast<size_t>(per_block) || need + static_cast<size_t>(reserve) > static_cast<size_t>(per_sm)) {
      why << form.stages << " ring stages (" << need << " bytes of shared memory) do not fit an SM; ";
    } else {
      EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
    }
  }
  (*known)[key] = why.str();
  return why.str();
}

// The ring form's own checks (both forms), appended to `why`.
void FormWhy(const MoeRingForm& form, std::ostringstream& why) {
  if (form.stages < 2 || form.stages > kMaxStages) why << "ring stages " << form.stages << " (2.." << kMaxStages << "); ";
  if (form.early_stages < 0) why << "early stages " << form.early_stages << " (0: all); ";
  if (form.grid != 0 && (form.grid * kMaxRounds < kTiles || form.grid > CurrentDeviceProps().sms))
    why << "grid " << form.grid << " (88 .. the SMs, or 0); ";
  if (form.producers != 1 && form.producers != 2 && form.producers != 4) why << "producers " << form.producers << " (1, 2 or 4); ";
}

}  // namespace

std::string MoeRingUnsupported(const MoePersistentParams& p, const MoeRingForm& form) {
  std::ostringstream why;
  if (IsDense(p)) {  // the dense form (moe_ring.h)
    if (p.hidden != kHd || p.shared_inter != kIsD)
      why << "dense shapes (hidden " << p.hidden << ", I " << p.shared_inter << ") are not DeepSeek-V2-Lite's (2048, 10944); ";
    if (!form.act_tagged) why << "the dense form needs act_tagged; ";
    if (!p.attn_out || !p.post_norm_weight) why << "needs attn_out and post_norm_weight (the folded post-attention norm); ";
    if (p.norm_weight) why << "no next norm in this form (norm_weight must be null); ";
    if (p.barriers_only) why << "barriers_only (a MoePersistent measurement) is not supported; ";
    if (!p.shared_gu || !p.shared_down || !p.act || !p.residual || !p.sync) why << "null pointer; ";
    const auto mis = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
    if (mis(p.shared_gu) || mis(p.shared_down) || mis(p.act)) why << "operands must be 16-byte aligned; ";
    if (reinterpret_cast<uintptr_t>(p.sync) % 8 != 0) why << "sync must be 8-byte aligned; ";
    FormWhy(form, why);
    if (!why.str().empty()) return why.str();
    return DeviceVerdict(form, true);
  }
  if (p.hidden != kHd || p.num_experts != kE || p.top_k != kK || p.inter != kI || p.shared_inter != kIs)
    why << "shapes (hidden " << p.hidden << ", experts " << p.num_experts << ", top_k " << p.top_k << ", I " << p.inter
        << ", shared I " << p.shared_inter << ") are not DeepSeek-V2-Lite's (2048, 64, 6, 1408, 2816); ";
  if (!p.attn_out || !p.post_norm_weight) why << "needs attn_out and post_norm_weight (the folded post-attention norm); ";
  if (p.norm_weight) why << "no next norm in this form (norm_weight must be null); ";
  if (p.barriers_only) why << "barriers_only (a MoePersistent measurement) is not supported; ";
  if (!p.router_tagged || reinterpret_cast<uintptr_t>(p.router_tagged) % 8 != 0) why << "needs router_tagged (8-byte aligned); ";
  if (!p.router_w || !p.w13 || !p.w2 || !p.shared_gu || !p.shared_down || !p.logits || !p.topk_ids || !p.topk_weights ||
      !p.act || !p.residual || !p.sync)
    why << "null pointer; ";
  const auto misaligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
  if (misaligned(p.w13) || misaligned(p.w2) || misaligned(p.shared_gu) || misaligned(p.shared_down) || misaligned(p.act))
    why << "operands must be 16-byte aligned; ";
  if (reinterpret_cast<uintptr_t>(p.sync) % 8 != 0) why << "sync must be 8-byte aligned; ";
  const MoeRoutingParams& rt = p.routing;
  if (rt.num_experts != p.num_experts || rt.top_k != p.top_k) why << "routing's E / top_k differ; ";
  if (rt.n_group < 1 || rt.n_group > 64 || p.num_experts % std::max(rt.n_group, 1) != 0 || rt.topk_group < 1 ||
      rt.topk_group > rt.n_group)
    why << "n_group " << rt.n_group << " / topk_group " << rt.topk_group << "; ";
  FormWhy(form, why);
  if (!why.str().empty()) return why.str();
  return DeviceVerdict(form, false);
}

MoeRingMaps MoeRingMakeMaps(const MoePersistentParams& p) {
  if (IsDense(p)) {  // gate_up [2][10944][hidden] as sgu, down [hidden][10944] as sdn (gu / dn unused)
    DS_CHECK(p.hidden == kHd && p.shared_inter == kIsD) << "MoeRingMakeMaps: not DeepSeek-V2-Lite's dense shapes";
    MoeRingMaps m{};
    const cuuint32_t box3[3] = {kBox, 8, 2}, box2[2] = {kBox, 16};
    const cuuint64_t sdims[3] = {kHd, kIsD, 2}, sstrides[2] = {kHd * 2, cuuint64_t{kIsD} * kHd * 2};
    m.sgu = Encode(p.shared_gu, 3, sdims, sstrides, box3);
    const cuuint64_t ddims[2] = {kIsD, kHd}, dstrides[1] = {kIsD * 2};
    m.sdn = Encode(p.shared_down, 2, ddims, dstrides, box2);
    m.gu = m.sgu;
    m.dn = m.sdn;
    return m;
  }
  DS_CHECK(p.hidden == kHd && p.num_experts == kE && p.inter == kI && p.shared_inter == kIs)
      << "MoeRingMakeMaps: not DeepSeek-V2-Lite's shapes";
  MoeRingMaps m;
  const cuuint32_t box3[3] = {kBox, 8, 2}, box2[2] = {kBox, 16};
  {  // w13 [E][2][I][hidden] as [2E][I][hidden]; shared_gu [2][Is][hidden]
    const cuuint64_t dims[3] = {kHd, kI, 2 * kE}, strides[2] = {kHd * 2, cuuint64_t{kI} * kHd * 2};
    m.gu = Encode(p.w13, 3, dims, strides, box3);
    const cuuint64_t sdims[3] = {kHd, kIs, 2}, sstrides[2] = {kHd * 2, cuuint64_t{kIs} * kHd * 2};
    m.sgu = Encode(p.shared_gu, 3, sdims, sstrides, box3);
  }
  {  // w2 [E hidden][I]; shared_down [hidden][Is]
    const cuuint64_t dims[2] = {kI, cuuint64_t{kE} * kHd}, strides[1] = {kI * 2};
    m.dn = Encode(p.w2, 2, dims, strides, box2);
    const cuuint64_t sdims[2] = {kIs, kHd}, sstrides[1] = {kIs * 2};
    m.sdn = Encode(p.shared_down, 2, sdims, sstrides, box2);
  }
  return m;
}

int MoeRing(const MoePersistentParams& p, const MoeRingMaps& maps, const MoeRingForm& form, uint64_t* act_tagged) {
  const std::string why = MoeRingUnsupported(p, form);
  DS_CHECK(why.empty()) << "MoeRing: " << why;
  DS_CHECK(!form.act_tagged || (act_tagged != nullptr && reinterpret_cast<uintptr_t>(act_tagged) % 8 == 0))
      << "MoeRing: the act_tagged form needs act_tagged ([kMoeRingActWords] 64-bit words, 8-byte aligned)";
  const size_t smem = SmemBytes(form.stages);
  const KernelFn kernel = KernelFor(form.producers, form.act_tagged, IsDense(p));
  // The MoE layers' carveout (MoePersistentParams::carveout: the runner's moe_carveout), where the
  // ring fits it (3 stages fit 58%, MoePersistent's; 4 do not): the attention kernel after it then
  // meets the shared-memory configuration it meets after MoePersistent. Timing only.
  const int carveout = SetSmemCarveout(reinterpret_cast<const void*>(kernel), p.carveout, 1, smem);
  const int grid = form.grid > 0 ? form.grid : CurrentDeviceProps().sms;
  LaunchCooperative(kernel, dim3(static_cast<unsigned>(grid)), dim3(32 * (kCw + form.producers + 1)), smem,
                    p.stream, maps, p, form.stages,
                    form.early_stages > 0 ? std::min(form.early_stages, form.stages) : form.stages, form.warm_route,
                    form.evict_first, form.act_tagged ? act_tagged : nullptr, form.act_lookahead);
  return carveout;
}

}  // namespace ds::cuda
