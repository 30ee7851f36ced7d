// Our FP8 block-scaled wgmma GEMMs (fp8_gemm_wgmma_sm90.h): the panel form (K <= 512) and the
// 128 x 144 tile form. PTX sources: PTX ISA 8.x, "wgmma.mma_async" (e4m3 operands, K-major
// shared-memory descriptors, the m64nNk32 accumulator fragment), "cp.async.bulk.tensor" (loads
// with mbarrier completion, stores with bulk groups), "mbarrier", "setmaxnreg"; tensor maps:
// CUDA driver API, cuTensorMapEncodeTiled.
//
// Panel form, shared memory (1024-byte aligned, 128-byte swizzle everywhere):
//   A panel:  kMaxKb boxes of [128 rows x 128 K bytes] (16 KB each); warpgroup w's rows at + w x 8 KB;
//   B ring:   kStages boxes of [128 weight rows x 128 K bytes] (16 KB each);
//   staging:  per consumer warpgroup two boxes of [64 rows x 64 bf16 columns] (8 KB each);
//   barriers: full / empty per stage, a_full / a_empty for the panel.
// Tile-144 form: kT144Stages stages of an A box [128 x 128 B] and a B box [144 x 128 B] (34 KB).
// Fragment of wgmma m64nN (fp32): thread t of the warpgroup holds d[4 i + {0, 1}] at row
// (t / 32) x 16 + (t % 32) / 4, columns 8 i + 2 (t % 4) + {0, 1}, and d[4 i + {2, 3}] 8 rows below.
#include "backend/cuda/fp8_gemm_wgmma_sm90.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma_ops.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

using sm90::BarArrive;
using sm90::BarExpectTx;
using sm90::BarInit;
using sm90::BarTryWait;
using sm90::BarArriveCluster;
using sm90::ClusterRank;
using sm90::ClusterSync;
using sm90::MapToRank;
using sm90::TmaLoadMulticast;
using sm90::Desc;
using sm90::FenceProxyAsync;
using sm90::NamedBarSync;
using sm90::PackBf16;
using sm90::RegAlloc;
using sm90::RegDealloc;
using sm90::SmemAddr;
using sm90::WgCommit;
using sm90::WgFence;
using sm90::WgWait;
using sm90::WgmmaE4m3;
using sm90::WgmmaE4m3Rs;

constexpr int kBM = 128, kBN = 128, kBK = 128;  // tile rows, columns; K block (bytes = e4m3 elements)
constexpr int kMaxKb = 4;                       // K <= 512
constexpr int kStages = 8;
constexpr int kThreads = 384;
constexpr uint32_t kBoxBytes = kBM * kBK;       // 16 KB: an A box or a B stage
constexpr uint32_t kStageOff = kMaxKb * kBoxBytes;
constexpr uint32_t kStagingOff = kStageOff + kStages * kBoxBytes;
constexpr uint32_t kStagingBytes = 64 * 128;    // [64 rows x 64 bf16] = 8 KB
constexpr uint32_t kBarOff = kStagingOff + 4 * kStagingBytes;
constexpr uint32_t kSmemBytes = kBarOff + 256 + 1024;  // barriers, and slack for the 1024-byte alignment
static_assert(kSmemBytes <= 227 * 1024, "panel form: over the sm_90 opt-in shared memory per block");
// setmaxnreg: the producer warpgroup drops to 24 registers so that the consumers get 240; the sum
// (24 x 128 + 240 x 256) is the 168 a thread of 384 that __launch_bounds__(384, 1) gives.
static_assert(24 * 128 + 240 * 256 <= 168 * 384, "setmaxnreg split over the register file");

struct PanelArgs {
  const float* x_scales;  // [K/128, Mp]
  const float* w_scales;  // [K/128, N/128]
  int Mp, N, kb, n_tiles, panels, tiles;
  int parts;  // > 0: CTA c holds panel c % panels and column tiles [part n_tiles / parts, ...), part = c / panels
};

__device__ __forceinline__ void Wait(uint32_t bar, uint32_t parity) {
  while (!BarTryWait(bar, parity)) {
  }
}
__device__ __forceinline__ void TmaLoad(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void TmaStore(const CUtensorMap* map, int c0, int c1, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(src)
               : "memory");
}
__device__ __forceinline__ void BulkCommit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void BulkWaitRead() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void BulkWaitRead1() { asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory"); }
__device__ __forceinline__ void BulkWaitAll() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

constexpr int kWhole = 0, kSplitHalves = 1, kPingPong = 2, kDoubleAcc = 3, kRegisterA = 4;  // Fp8GemmWgmmaSchedule
constexpr int kNumSchedules = 5;  // the launchers' dispatch covers [0, kNumSchedules); others are rejected
// Ping-pong between the two consumer warpgroups (kPingPong): warpgroup h issues a K block's wgmma
// only after the other has issued its own (named barrier 5 + h, 256 threads), and lets the other
// go once its own are issued, so the tensor cores alternate between them and each promotes while
// the other's wgmma runs (FlashAttention-3's warp-group ping-pong). Warpgroup 1 opens with an
// arrival for warpgroup 0; warpgroup 0 ends by taking warpgroup 1's last arrival.
__device__ __forceinline__ void PingPongWait(int half) { NamedBarSync(5 + half, 256); }
__device__ __forceinline__ void PingPongPass(int half) { sm90::NamedBarArrive(5 + (half ^ 1), 256); }

// The wgmma sums of one K block over its four k32 steps (the whole tile's columns, or one half):
// A (64 rows, K-major, 128-byte rows) at a_box, B (the columns' weight rows) at b_box.
template <int R>
__device__ __forceinline__ void MmaKBlock(float (&d)[R], uint32_t a_box, uint32_t b_box) {
#pragma unroll
  for (int ks = 0; ks < kBK / 32; ++ks) WgmmaE4m3(d, Desc(a_box + ks * 32, 16, 1024), Desc(b_box + ks * 32, 16, 1024), ks);
}

// K blocks [kb0, kb0 + U) of one consumer warpgroup, the tile's columns in two halves with an
// accumulator set each (R registers): while the tensor cores run one half's wgmma, the other
// half's sums are promoted, so the promotion leaves the tensor cores busy. Fully unrolled and
// drained at the end: with wgmma groups in flight across a loop's back edge, ptxas serialises
// the wgmmas (C7514). Block kb's scales (load(kb): float4 of row r0's, row r0 + 8's and the
// weight scales, from registers or shared memory) are read once its stage has landed.
// Callbacks: wait_full() waits for the next stage's data and moves to it; issue(acc, h) issues half h's wgmma of the current stage (fence, four k32
// steps, commit); release() frees the oldest stage in use; promote(acc, h, scales) adds half h's
// sums into the output registers. Order (A, B: halves 0, 1): [B(kb) in flight] issue A(kb + 1);
// wait<1> -> release kb's stage, promote B(kb); issue B(kb + 1); wait<1> -> promote A(kb + 1).
template <int U, int R, class WaitFull, class Issue, class Release, class PromoteFn, class Load>
__device__ __forceinline__ void KChunk(int kb0, float (&a)[R], float (&b)[R], WaitFull& wait_full, Issue& issue,
                                       Release& release, PromoteFn& promote, Load& load) {
  wait_full();
  float4 sc = load(kb0);
  issue(a, 0);
  issue(b, 1);
  WgWait<1>();
  sm90::FenceRegs(a);
  promote(a, 0, sc);
#pragma unroll
  for (int u = 1; u < U; ++u) {
    wait_full();
    const float4 next = load(kb0 + u);
    issue(a, 0);
    WgWait<1>();
    sm90::FenceRegs(b);
    release();
    promote(b, 1, sc);
    issue(b, 1);
    WgWait<1>();
    sm90::FenceRegs(a);
    promote(a, 0, next);
    sc = next;
  }
  WgWait<0>();
  sm90::FenceRegs(b);
  release();
  promote(b, 1, sc);
}

// A K block of the whole-tile schedules in two halves, so that the panel form's overlapped
// epilogue can run between them: WholeIssue issues the warpgroup's wgmma over all the tile's
// columns (taking its turn first under kPingPong); WholeWait waits for it and releases the stage.
template <int kSchedule, int R>
__device__ __forceinline__ void WholeIssue(float (&acc)[R], int half, uint32_t a_box, uint32_t b_box) {
  if constexpr (kSchedule == kPingPong) PingPongWait(half);
  WgFence();
  MmaKBlock(acc, a_box, b_box);
  WgCommit();
  if constexpr (kSchedule == kPingPong) PingPongPass(half);
}
template <int R, class Release>
__device__ __forceinline__ void WholeWait(float (&acc)[R], Release& release) {
  WgWait<0>();
  sm90::FenceRegs(acc);
  release();
}
// One K block of the whole-tile schedules (kWhole, kPingPong): WholeIssue + WholeWait; the caller
// promotes acc after.
template <int kSchedule, int R, class Release>
__device__ __forceinline__ void WholeKBlock(float (&acc)[R], int half, uint32_t a_box, uint32_t b_box, Release& release) {
  WholeIssue<kSchedule>(acc, half, a_box, b_box);
  WholeWait(acc, release);
}

// out0 / out1 (the two column halves, kFrags / 2 fragments each) += acc x the scales: fragments
// [0, kLo) take (lo0, lo1) for rows r0 / r0 + 8, the rest (hi0, hi1).
template <int kFrags, int kLo>
__device__ __forceinline__ void PromoteWhole(const float (&acc)[4 * kFrags], float (&out0)[2 * kFrags], float (&out1)[2 * kFrags],
                                             float lo0, float lo1, float hi0, float hi1) {
  constexpr int kHalf = kFrags / 2;
#pragma unroll
  for (int i = 0; i < kFrags; ++i) {
    const float s0 = i < kLo ? lo0 : hi0, s1 = i < kLo ? lo1 : hi1;
    float* o = (i < kHalf ? out0 : out1) + 4 * (i % kHalf);
    o[0] = fmaf(acc[4 * i + 0], s0, o[0]);
    o[1] = fmaf(acc[4 * i + 1], s0, o[1]);
    o[2] = fmaf(acc[4 * i + 2], s1, o[2]);
    o[3] = fmaf(acc[4 * i + 3], s1, o[3]);
  }
}

// K blocks [kb0, kb0 + U) of one consumer warpgroup with the whole tile's columns a wgmma, the
// blocks alternating between accumulator sets a (even u) and b (odd u): block u + 1's wgmma is
// issued before block u's sums are promoted, so the warpgroup always has a K block in flight.
// Fully unrolled and drained at the end (C7514, as KChunk). after_first() runs once block kb0's
// wgmma is issued (the panel form's overlapped epilogue). Callbacks as KChunk's but without a
// half: issue(acc), promote(acc, scales).
template <int U, int R, class WaitFull, class Issue, class Release, class PromoteFn, class Load, class Hook>
__device__ __forceinline__ void DoubleAccChunk(int kb0, float (&a)[R], float (&b)[R], WaitFull& wait_full, Issue& issue,
                                               Release& release, PromoteFn& promote, Load& load, Hook& after_first) {
  wait_full();
  float4 sc = load(kb0);
  issue(a);
  after_first();
#pragma unroll
  for (int u = 1; u < U; ++u) {
    wait_full();
    const float4 next = load(kb0 + u);
    if (u % 2 == 1) {
      issue(b);
      WgWait<1>();
      sm90::FenceRegs(a);
      release();
      promote(a, sc);
    } else {
      issue(a);
      WgWait<1>();
      sm90::FenceRegs(b);
      release();
      promote(b, sc);
    }
    sc = next;
  }
  WgWait<0>();
  if constexpr (U % 2 == 0) {
    sm90::FenceRegs(b);
    release();
    promote(b, sc);
  } else {
    sm90::FenceRegs(a);
    release();
    promote(a, sc);
  }
}

// The K loop: chunks of U blocks (KChunk), then single blocks.
template <int U, int R, class WaitFull, class Issue, class Release, class PromoteFn, class Load>
__device__ __forceinline__ void SplitHalvesKLoop(int kb_n, float (&a)[R], float (&b)[R], WaitFull wait_full, Issue issue,
                                                 Release release, PromoteFn promote, Load load) {
  int kb = 0;
  for (; kb + U <= kb_n; kb += U) KChunk<U>(kb, a, b, wait_full, issue, release, promote, load);
  for (; kb < kb_n; ++kb) KChunk<1>(kb, a, b, wait_full, issue, release, promote, load);
}

// The CTA's tiles as a range [begin, end) of a linear index u and its map to (panel, column tile).
// With parts > 0 (panels <= SMs), CTA c holds one panel, c % panels, and a contiguous part of its
// column tiles: the CTAs of one part sweep the same weight tiles in step, so each weight tile
// comes from DRAM about once and from L2 for the other panels. Otherwise a contiguous, balanced
// range of the panel-major tile order (a panel reload where the range crosses panels).
struct TileSeq {
  int begin, end, panel;  // panel >= 0: fixed
  int n_tiles;
  __device__ __forceinline__ TileSeq(const PanelArgs& a) : n_tiles(a.n_tiles) {
    if (a.parts > 0) {
      const int part = blockIdx.x / a.panels;
      panel = blockIdx.x % a.panels;
      begin = static_cast<int>(static_cast<int64_t>(a.n_tiles) * part / a.parts);
      end = static_cast<int>(static_cast<int64_t>(a.n_tiles) * (part + 1) / a.parts);
    } else {
      panel = -1;
      begin = static_cast<int>(static_cast<int64_t>(a.tiles) * blockIdx.x / gridDim.x);
      end = static_cast<int>(static_cast<int64_t>(a.tiles) * (blockIdx.x + 1) / gridDim.x);
    }
  }
  __device__ __forceinline__ int Panel(int u) const { return panel >= 0 ? panel : u / n_tiles; }
  __device__ __forceinline__ int Col(int u) const { return panel >= 0 ? u : u % n_tiles; }
};

// kOverlap (kWhole, kPingPong, kDoubleAcc, kRegisterA): a tile's epilogue runs under the next
// tile's first K block (issued just before it), so the tensor cores do not wait for the bf16
// stores (same results).
// kDeep (kRegisterA with the panels in step, so a CTA's panel never changes): once the consumers
// hold the panel in registers, its 64 KB hold 4 more weight stages (12 in all).
// kDs (kDeep with kOverlap): two staging sets, alternating by tile, so an epilogue waits only for
// the store of two tiles back; the second set takes ring boxes 6-7 (10 weight stages).
template <int kSchedule, bool kOverlap, bool kDeep = false, bool kDs = false>  // Fp8GemmWgmmaSchedule
__global__ void __launch_bounds__(kThreads, 1)
    Fp8GemmPanelKernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                       const __grid_constant__ CUtensorMap map_y, const PanelArgs args) {
  static_assert(!kDeep || kSchedule == kRegisterA, "the deep ring reuses the panel's shared memory");
  static_assert(!kDs || (kDeep && kOverlap), "two staging sets: on the deep ring with the overlap");
  constexpr int kRing = kDs ? ::ds::cuda::kStages - 2 : ::ds::cuda::kStages;  // stages in the ring boxes
  constexpr int kStages = kDeep ? kRing + kMaxKb : kRing;
  static_assert(2 * 8 * kStages + 16 <= 256, "barriers");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (base - SmemAddr(smem_raw));
  // Stage s's weight box: the ring, then (kDeep) the panel's boxes.
  const auto stage_box = [base](int s) {
    if constexpr (!kDeep) return base + kStageOff + s * kBoxBytes;
    return s < kRing ? base + kStageOff + s * kBoxBytes : base + (s - kRing) * kBoxBytes;
  };
  const uint32_t bar_full = base + kBarOff, bar_empty = bar_full + 8 * kStages;
  const uint32_t bar_a_full = bar_empty + 8 * kStages, bar_a_empty = bar_a_full + 8;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarInit(bar_full + 8 * s, 1);
      BarInit(bar_empty + 8 * s, 8);  // lane 0 of each of the 8 consumer warps
    }
    BarInit(bar_a_full, 1);
    BarInit(bar_a_empty, 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const TileSeq seq(args);
  const int kb_n = args.kb;

  if (wg == 0) {  // ------------------------------------------------ producer
    RegDealloc<24>();
    if (tid != 0) return;
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_b)) : "memory");
    int stage = 0;
    uint32_t phase = 0;
    int panel_loaded = -1, a_loads = 0;
    for (int t = seq.begin; t < seq.end; ++t) {
      const int panel = seq.Panel(t), j = seq.Col(t);
      if (panel != panel_loaded) {
        // The consumers release the previous panel after their last MMA on it.
        if (a_loads > 0) Wait(bar_a_empty, (a_loads - 1) & 1);
        BarExpectTx(bar_a_full, kBoxBytes * kb_n);
        for (int kb = 0; kb < kb_n; ++kb) TmaLoad(base + kb * kBoxBytes, &map_a, kb * kBK, panel * kBM, bar_a_full);
        panel_loaded = panel;
        ++a_loads;
      }
      for (int kb = 0; kb < kb_n; ++kb) {
        Wait(bar_empty + 8 * stage, phase ^ 1);
        // kDeep: the panel's boxes take weights only once every consumer warp holds the panel.
        if (kDeep && phase == 0 && stage == kRing) Wait(bar_a_empty, 0);
        BarExpectTx(bar_full + 8 * stage, kBoxBytes);
        TmaLoad(stage_box(stage), &map_b, kb * kBK, j * kBN, bar_full + 8 * stage);
        if (++stage == kStages) { stage = 0; phase ^= 1; }
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  RegAlloc<240>();
  if constexpr (kSchedule == kPingPong) {
    if (wg == 2) PingPongPass(1);  // warpgroup 0 goes first
  }
  const int half = wg - 1;  // rows [64 half, 64 half + 64) of the tile
  const int warp = tid / 32, lane = tid % 32;
  const int row0 = half * 64 + warp * 16 + lane / 4;  // and row0 + 8
  const uint32_t a_half = base + half * (kBoxBytes / 2);
  // Staging set 0 after the ring; set 1 (kDs) in ring boxes 6-7. 16 KB a warpgroup in each.
  constexpr uint32_t kSet1Off = kStageOff + (::ds::cuda::kStages - 2) * kBoxBytes;
  int epi_count = 0;
  float sa0[kMaxKb], sa1[kMaxKb];
  // kRegisterA: the warpgroup's 64 panel rows as wgmma A fragments (K block, k32 step, fragment),
  // loaded once a panel; its shared-memory copy is released right after.
  uint32_t areg[kSchedule == kRegisterA ? kMaxKb : 1][4][4];
  int stage = 0;
  uint32_t phase = 0;
  int panel_cur = -1, a_waits = 0;
  // The weight scales of a tile's K blocks, loaded a tile ahead (a global load's latency would
  // otherwise stall the tile's first promotion).
  const auto load_sb = [&](int t, float (&sb)[kMaxKb]) {
    const int j = seq.Col(t);
#pragma unroll
    for (int kb = 0; kb < kMaxKb; ++kb)
      sb[kb] = kb < kb_n && t < seq.end ? __ldg(args.w_scales + kb * (args.N / kBN) + j) : 0.f;
  };
  float sb_next[kMaxKb];
  load_sb(seq.begin, sb_next);
  // Output columns [0, 64) and [64, 128) of this warpgroup's 64 rows of the current tile.
  float out0[32], out1[32];
  // Epilogue: out0 / out1 as bf16 through the staging boxes into a TMA store of tile (panel, j).
  const auto epilogue = [&](int panel, int j) {
    const uint32_t set_off = (kDs && (epi_count & 1) ? kSet1Off : kStagingOff) + half * 2 * kStagingBytes;
    const uint32_t staging = base + set_off;
    uint8_t* const staging_ptr = smem + set_off;
    ++epi_count;
    // The store that last used this set must have read it (kDs: the one of two tiles back).
    if (tid == 0) {
      if constexpr (kDs) BulkWaitRead1();
      else BulkWaitRead();
    }
    NamedBarSync(1 + half, 128);
    const int r_loc = warp * 16 + lane / 4;  // row within this warpgroup's 64, and + 8
#pragma unroll
    for (int box = 0; box < 2; ++box) {  // column half = staging box
      const float (&out)[32] = box == 0 ? out0 : out1;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = 8 * i + 2 * (lane % 4);  // column within the box
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = r_loc + 8 * h;
          const uint32_t off = box * kStagingBytes + r * 128 + ((((c / 8) ^ (r % 8)) * 16) | ((c % 8) * 2));
          *reinterpret_cast<uint32_t*>(staging_ptr + off) = PackBf16(out[4 * i + 2 * h], out[4 * i + 2 * h + 1]);
        }
      }
    }
    FenceProxyAsync();
    NamedBarSync(1 + half, 128);
    if (tid == 0) {
      const int row = panel * kBM + half * 64;
      TmaStore(&map_y, j * kBN, row, staging);
      TmaStore(&map_y, j * kBN + 64, row, staging + kStagingBytes);
      BulkCommit();
    }
  };
  int pend_panel = 0, pend_j = -1;  // kOverlap: the finished tile whose epilogue is still to run
  for (int t = seq.begin; t < seq.end; ++t) {
    const int panel = seq.Panel(t), j = seq.Col(t);
    float sb[kMaxKb];
#pragma unroll
    for (int kb = 0; kb < kMaxKb; ++kb) sb[kb] = sb_next[kb];
    load_sb(t + 1, sb_next);
    if (panel != panel_cur) {
      const int r0 = panel * kBM + row0, r1 = r0 + 8;
#pragma unroll
      for (int kb = 0; kb < kMaxKb; ++kb) {
        sa0[kb] = kb < kb_n && r0 < args.Mp ? __ldg(args.x_scales + static_cast<int64_t>(kb) * args.Mp + r0) : 0.f;
        sa1[kb] = kb < kb_n && r1 < args.Mp ? __ldg(args.x_scales + static_cast<int64_t>(kb) * args.Mp + r1) : 0.f;
      }
      Wait(bar_a_full, a_waits & 1);
      ++a_waits;
      panel_cur = panel;
      if constexpr (kSchedule == kRegisterA) {
        // Row r of box kb at r x 128 bytes, its 16-byte chunk c at (c ^ (r % 8)) x 16 (128-byte swizzle).
        const int r_a = half * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int kb = 0; kb < kMaxKb; ++kb)
#pragma unroll
          for (int ks = 0; ks < 4; ++ks)
#pragma unroll
            for (int f = 0; f < 4; ++f) {
              const int r = r_a + 8 * (f & 1), kbyte = ks * 32 + 4 * (lane % 4) + 16 * (f >> 1);
              areg[kb][ks][f] = kb < kb_n ? *reinterpret_cast<const uint32_t*>(
                                                smem + kb * kBoxBytes + r * 128 + ((((kbyte / 16) ^ (r % 8)) * 16) | (kbyte % 16)))
                                          : 0u;
            }
        // The panel was read by ordinary loads and the producer's TMA (the async proxy) overwrites
        // it next: order the reads before the release across proxies.
        FenceProxyAsync();
        __syncwarp();
        if (lane == 0) BarArrive(bar_a_empty);  // the panel's shared memory may be overwritten now
      }
    }
    if constexpr (!kOverlap) {
#pragma unroll
      for (int i = 0; i < 32; ++i) out0[i] = out1[i] = 0.f;
    }
    int kb_issue = 0;  // the K block whose stage `stage` holds
    const auto wait_full = [&]() {
      if (kb_issue > 0 && ++stage == kStages) { stage = 0; phase ^= 1; }
      Wait(bar_full + 8 * stage, phase);
      ++kb_issue;
    };
    const auto issue = [&](float (&acc)[32], int h) {
      WgFence();
      MmaKBlock(acc, a_half + (kb_issue - 1) * kBoxBytes, stage_box(stage) + h * (kBoxBytes / 2));
      WgCommit();
    };
    int rel_stage = stage;
    const auto release = [&]() {
      if (lane == 0) BarArrive(bar_empty + 8 * rel_stage);
      if (++rel_stage == kStages) rel_stage = 0;
    };
    const auto load = [&](int kb) {
      const float w = kb == 0 ? sb[0] : kb == 1 ? sb[1] : kb == 2 ? sb[2] : sb[3];
      const float a0 = kb == 0 ? sa0[0] : kb == 1 ? sa0[1] : kb == 2 ? sa0[2] : sa0[3];
      const float a1 = kb == 0 ? sa1[0] : kb == 1 ? sa1[1] : kb == 2 ? sa1[2] : sa1[3];
      return make_float4(a0 * w, a1 * w, 0.f, 0.f);
    };
    const auto promote = [&](const float (&acc)[32], int h, const float4& sc) {
      float (&out)[32] = h == 0 ? out0 : out1;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        out[4 * i + 0] = fmaf(acc[4 * i + 0], sc.x, out[4 * i + 0]);
        out[4 * i + 1] = fmaf(acc[4 * i + 1], sc.x, out[4 * i + 1]);
        out[4 * i + 2] = fmaf(acc[4 * i + 2], sc.y, out[4 * i + 2]);
        out[4 * i + 3] = fmaf(acc[4 * i + 3], sc.y, out[4 * i + 3]);
      }
    };
    // kOverlap: runs once K block 0's wgmma is issued: the previous tile's epilogue, then out0 / out1
    // cleared for this tile.
    const auto after_first = [&]() {
      if constexpr (kOverlap) {
        if (pend_j >= 0) epilogue(pend_panel, pend_j);
#pragma unroll
        for (int i = 0; i < 32; ++i) out0[i] = out1[i] = 0.f;
      }
    };
    // f(std::integral_constant<int, kb_n>) for kb_n in [1, kMaxKb]: the fully unrolled K loops.
    const auto with_kb_n = [&](auto f) {
      switch (kb_n) {
        case 4: f(std::integral_constant<int, 4>{}); break;
        case 3: f(std::integral_constant<int, 3>{}); break;
        case 2: f(std::integral_constant<int, 2>{}); break;
        default: f(std::integral_constant<int, 1>{}); break;
      }
    };
    if constexpr (kSchedule == kSplitHalves) {
      float acc0[32], acc1[32];
      SplitHalvesKLoop<kMaxKb>(kb_n, acc0, acc1, wait_full, issue, release, promote, load);
    } else if constexpr (kSchedule == kRegisterA) {
      // kWhole with A from registers.
      float acc[64];
      with_kb_n([&](auto u_c) {
        constexpr int U = decltype(u_c)::value;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          wait_full();
          const float4 sc = load(u);
          const uint32_t b_box = stage_box(stage);
          WgFence();
#pragma unroll
          for (int ks = 0; ks < kBK / 32; ++ks) WgmmaE4m3Rs(acc, areg[u][ks], Desc(b_box + ks * 32, 16, 1024), ks);
          WgCommit();
          if (u == 0) after_first();
          WgWait<0>();
          sm90::FenceRegs(acc);
          release();
          PromoteWhole<16, 16>(acc, out0, out1, sc.x, sc.y, sc.x, sc.y);  // (one weight block a tile)
        }
      });
    } else if constexpr (kSchedule == kDoubleAcc) {
      float acc0[64], acc1[64];
      const auto issue_whole = [&](float (&acc)[64]) {
        WgFence();
        MmaKBlock(acc, a_half + (kb_issue - 1) * kBoxBytes, stage_box(stage));
        WgCommit();
      };
      const auto promote_whole = [&](const float (&acc)[64], const float4& sc) {
        PromoteWhole<16, 16>(acc, out0, out1, sc.x, sc.y, sc.x, sc.y);  // (one weight block a tile)
      };
      with_kb_n([&](auto u_c) {
        DoubleAccChunk<decltype(u_c)::value>(0, acc0, acc1, wait_full, issue_whole, release, promote_whole, load,
                                             after_first);
      });
    } else {
      // The whole 128 columns a wgmma; the promotion runs while the other warpgroup's wgmma does.
      // With kOverlap, K block 0 is peeled: its wgmma is issued, the previous tile's epilogue runs
      // under it, then the wait.
      float acc[64];
      int kb = 0;
      if constexpr (kOverlap) {
        wait_full();
        const float4 sc0 = load(0);
        WholeIssue<kSchedule>(acc, half, a_half, stage_box(stage));
        after_first();
        WholeWait(acc, release);
        PromoteWhole<16, 16>(acc, out0, out1, sc0.x, sc0.y, sc0.x, sc0.y);
        kb = 1;
      }
      for (; kb < kb_n; ++kb) {
        wait_full();
        const float4 sc = load(kb);
        WholeKBlock<kSchedule>(acc, half, a_half + (kb_issue - 1) * kBoxBytes, stage_box(stage), release);
        PromoteWhole<16, 16>(acc, out0, out1, sc.x, sc.y, sc.x, sc.y);  // (one weight block a tile)
      }
    }
    if constexpr (kOverlap) {  // this tile's epilogue runs under the next tile's first K block
      pend_panel = panel;
      pend_j = j;
    }
    if (++stage == kStages) { stage = 0; phase ^= 1; }
    // The panel's last tile: the A boxes may be overwritten once every consumer warp is here.
    const bool last_of_panel = t + 1 == seq.end || seq.Panel(t + 1) != panel;
    if (kSchedule != kRegisterA && last_of_panel && lane == 0) BarArrive(bar_a_empty);
    if constexpr (!kOverlap) epilogue(panel, j);
  }
  if constexpr (kOverlap) {
    if (pend_j >= 0) epilogue(pend_panel, pend_j);
  }
  if (tid == 0) BulkWaitAll();
  if constexpr (kSchedule == kPingPong) {
    if (wg == 1) PingPongWait(0);  // warpgroup 1's last pass
  }
}

// ---------------------------------------------------------------- the 128 x 144 tile form
constexpr int kT144N = 144;
constexpr int kT144Stages = 6;
constexpr uint32_t kT144BBytes = kT144N * kBK;                    // 18 KB
constexpr uint32_t kT144StageBytes = kBoxBytes + kT144BBytes;     // 34 KB (a multiple of 1024)
// Per stage, the 128 rows' activation scales of its K block (bulk-copied with the tiles); per tile,
// the weight scales of its two 128-column blocks for every K block (kT144MaxKb of them).
constexpr int kT144MaxKb = 128;  // K <= 16384
constexpr uint32_t kT144XsOff = kT144Stages * kT144StageBytes;
constexpr uint32_t kT144WsOff = kT144XsOff + kT144Stages * kBM * 4;
constexpr uint32_t kT144BarOff = kT144WsOff + kT144MaxKb * 2 * 4;
constexpr uint32_t kT144SmemBytes = kT144BarOff + 128 + 1024;
static_assert(kT144SmemBytes <= 227 * 1024, "tile-144 form: over the sm_90 opt-in shared memory per block");

struct Tile144Args {
  const float* x_scales;  // [K/128, Mp]
  const float* w_scales;  // [K/128, ceil(N/128)]
  __nv_bfloat16* y;
  int64_t ldy;
  int Mp, kb, nb, m_tiles, n_tiles;
};

// The cluster helpers (ClusterRank, ClusterSync, MapToRank, BarArriveCluster, TmaLoadMulticast) are
// in sm90_ptx.cuh.
// A 1-d bulk copy (bytes % 16 == 0, 16-byte aligned ends) completing on the mbarrier.
__device__ __forceinline__ void BulkLoad(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}

// kCluster 1, or 2: pairs of CTAs on neighbouring column tiles of one row tile (launched with
// cluster dimension 2; an even n_tiles and grid keep their tiles in step). Each CTA loads a
// 128 / kCluster-row slice of the A box and multicasts it to both (map_a: boxes of that many
// rows), so A crosses L2 once a pair; a stage is free once every consumer warp of both CTAs
// released it (8 x kCluster arrivals on each CTA's empty barrier, from lanes 0 .. kCluster - 1).
template <int kSchedule, int kCluster>  // Fp8GemmWgmmaSchedule
__global__ void __launch_bounds__(kThreads, 1)
    Fp8GemmTile144Kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                         const Tile144Args args) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (base - SmemAddr(smem_raw));
  const float* const xs_smem = reinterpret_cast<const float*>(smem + kT144XsOff);  // [stage][128]
  float* const ws_smem = reinterpret_cast<float*>(smem + kT144WsOff);              // [kb][2]
  const uint32_t bar_full = base + kT144BarOff, bar_empty = bar_full + 8 * kT144Stages;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kT144Stages; ++s) {
      BarInit(bar_full + 8 * s, 1);
      BarInit(bar_empty + 8 * s, 8 * kCluster);  // lane 0 of each consumer warp of the cluster's CTAs
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // (Every CTA's barriers initialised before any multicast lands or remote arrival comes.)
  if constexpr (kCluster > 1) ClusterSync();
  else __syncthreads();
  const int tiles = args.m_tiles * args.n_tiles, kb_n = args.kb;

  if (wg == 0) {  // ------------------------------------------------ producer
    RegDealloc<24>();
    if (tid != 0) {
      if constexpr (kCluster > 1) ClusterSync();  // the closing cluster barrier (below)
      return;
    }
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_b)) : "memory");
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int mt = t / args.n_tiles, j = t % args.n_tiles;
      for (int kb = 0; kb < kb_n; ++kb) {
        Wait(bar_empty + 8 * stage, phase ^ 1);
        const uint32_t st = base + stage * kT144StageBytes;
        // The block's activation scales of the tile's rows < Mp (Mp % 16 == 0: whole 16-byte units).
        const uint32_t xs_bytes = static_cast<uint32_t>(min(kBM, args.Mp - mt * kBM)) * 4;
        BarExpectTx(bar_full + 8 * stage, kT144StageBytes + xs_bytes);
        if constexpr (kCluster > 1) {
          const uint32_t rank = ClusterRank();
          TmaLoadMulticast(st + rank * (kBoxBytes / kCluster), &map_a, kb * kBK, mt * kBM + rank * (kBM / kCluster),
                           bar_full + 8 * stage, static_cast<uint16_t>((1u << kCluster) - 1));
        } else {
          TmaLoad(st, &map_a, kb * kBK, mt * kBM, bar_full + 8 * stage);
        }
        TmaLoad(st + kBoxBytes, &map_b, kb * kBK, j * kT144N, bar_full + 8 * stage);
        BulkLoad(base + kT144XsOff + stage * kBM * 4, args.x_scales + static_cast<int64_t>(kb) * args.Mp + mt * kBM,
                 xs_bytes, bar_full + 8 * stage);
        if (++stage == kT144Stages) { stage = 0; phase ^= 1; }
      }
    }
    // No CTA leaves while another may still multicast into it or arrive on its barriers.
    if constexpr (kCluster > 1) {
      __syncwarp(1u);
      ClusterSync();
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  RegAlloc<240>();
  if constexpr (kSchedule == kPingPong) {
    if (wg == 2) PingPongPass(1);  // warpgroup 0 goes first
  }
  const int half = wg - 1;
  const int warp = tid / 32, lane = tid % 32;
  const int row_in_tile = half * 64 + warp * 16 + lane / 4;  // and + 8
  int stage = 0;
  uint32_t phase = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int mt = t / args.n_tiles, j = t % args.n_tiles;
    const int r0 = mt * kBM + row_in_tile, r1 = r0 + 8;
    // The tile's columns [144 j, 144 j + 144) meet weight scale blocks blk_lo and blk_lo + 1;
    // fragment i (columns 8 i ..) takes blk_lo's scale while 144 j + 8 i < boundary.
    const int col0 = j * kT144N, blk_lo = col0 / 128;
    const int boundary = (blk_lo + 1) * 128 - col0;  // first tile column of block blk_lo + 1
    const bool has_hi = blk_lo + 1 < args.nb;
    // The tile's weight scales into shared memory (after every consumer is done with the last
    // tile's): ws_smem[2 kb + {0, 1}] = blocks blk_lo and blk_lo + 1 of K block kb.
    NamedBarSync(3, 256);
    for (int i = threadIdx.x - 128; i < 2 * kb_n; i += 256)
      ws_smem[i] = (i & 1) == 0 || has_hi ? __ldg(args.w_scales + static_cast<int64_t>(i / 2) * args.nb + blk_lo + (i & 1))
                                          : 0.f;
    NamedBarSync(3, 256);
    // Output columns [0, 72) and [72, 144) of this warpgroup's 64 rows (SplitHalvesKLoop).
    float out0[36], out1[36];
#pragma unroll
    for (int i = 0; i < 36; ++i) out0[i] = out1[i] = 0.f;
    bool first = true;
    const auto wait_full = [&]() {
      if (!first && ++stage == kT144Stages) { stage = 0; phase ^= 1; }
      first = false;
      Wait(bar_full + 8 * stage, phase);
    };
    const auto issue = [&](float (&acc)[36], int h) {
      const uint32_t st = base + stage * kT144StageBytes;
      WgFence();
      // B rows [72 h, 72 h + 72): 9 swizzle atoms of 8 rows in.
      MmaKBlock(acc, st + half * (kBoxBytes / 2), st + kBoxBytes + h * (kT144BBytes / 2));
      WgCommit();
    };
    int rel_stage = stage;
    const auto release = [&]() {
      if constexpr (kCluster > 1) {
        // Lane q of each warp arrives on CTA q's barrier, all in parallel (a chain of remote
        // arrivals from one lane, each with cluster-scope release, made the multicast form 2-5x
        // slower: session 17 runs 7 and 10).
        if (lane < kCluster) BarArriveCluster(MapToRank(bar_empty + 8 * rel_stage, lane));
      } else {
        if (lane == 0) BarArrive(bar_empty + 8 * rel_stage);
      }
      if (++rel_stage == kT144Stages) rel_stage = 0;
    };
    // Block kb's scales from shared memory: the activation scales that came with its stage
    // (KChunk calls load(kb) right after waiting for it) and the tile's weight scales.
    const auto load = [&](int kb) {
      const float* xs = xs_smem + stage * kBM;
      const float2 w = *reinterpret_cast<const float2*>(ws_smem + 2 * kb);
      return make_float4(xs[row_in_tile], xs[row_in_tile + 8], w.x, w.y);
    };
    const auto promote = [&](const float (&acc)[36], int h, const float4& sc) {
      float (&out)[36] = h == 0 ? out0 : out1;
      const float lo0 = sc.x * sc.z, lo1 = sc.y * sc.z, hi0 = sc.x * sc.w, hi1 = sc.y * sc.w;
#pragma unroll
      for (int i = 0; i < 9; ++i) {
        const bool lo = 72 * h + 8 * i < boundary;
        const float s0 = lo ? lo0 : hi0, s1 = lo ? lo1 : hi1;
        out[4 * i + 0] = fmaf(acc[4 * i + 0], s0, out[4 * i + 0]);
        out[4 * i + 1] = fmaf(acc[4 * i + 1], s0, out[4 * i + 1]);
        out[4 * i + 2] = fmaf(acc[4 * i + 2], s1, out[4 * i + 2]);
        out[4 * i + 3] = fmaf(acc[4 * i + 3], s1, out[4 * i + 3]);
      }
    };
    if constexpr (kSchedule == kSplitHalves) {
      float acc0[36], acc1[36];
      SplitHalvesKLoop<8>(kb_n, acc0, acc1, wait_full, issue, release, promote, load);
    } else {
      // The whole 144 columns a wgmma; the promotion runs while the other warpgroup's wgmma does.
      // Fragments [0, lo_frags) take weight block blk_lo's scale, the rest blk_lo + 1's: boundary is a
      // multiple of 16, so lo_frags is even, 2-16; one specialisation each keeps the selects out of
      // the promotion.
      const auto k_loop = [&](auto lo_frags) {
        constexpr int kLo = decltype(lo_frags)::value;
        if constexpr (kSchedule == kDoubleAcc) {
          // Two accumulator sets, chunks of 8 K blocks (DoubleAccChunk), then single blocks.
          float acc0[72], acc1[72];
          const auto issue_whole = [&](float (&acc)[72]) {
            const uint32_t st = base + stage * kT144StageBytes;
            WgFence();
            MmaKBlock(acc, st + half * (kBoxBytes / 2), st + kBoxBytes);
            WgCommit();
          };
          const auto promote_whole = [&](const float (&acc)[72], const float4& sc) {
            PromoteWhole<18, kLo>(acc, out0, out1, sc.x * sc.z, sc.y * sc.z, sc.x * sc.w, sc.y * sc.w);
          };
          const auto nothing = [] {};
          int kb = 0;
          for (; kb + 8 <= kb_n; kb += 8)
            DoubleAccChunk<8>(kb, acc0, acc1, wait_full, issue_whole, release, promote_whole, load, nothing);
          for (; kb < kb_n; ++kb)
            DoubleAccChunk<1>(kb, acc0, acc1, wait_full, issue_whole, release, promote_whole, load, nothing);
        } else {
          float acc[72];
          for (int kb = 0; kb < kb_n; ++kb) {
            wait_full();
            const float4 sc = load(kb);
            const uint32_t st = base + stage * kT144StageBytes;
            WholeKBlock<kSchedule>(acc, half, st + half * (kBoxBytes / 2), st + kBoxBytes, release);
            PromoteWhole<18, kLo>(acc, out0, out1, sc.x * sc.z, sc.y * sc.z, sc.x * sc.w, sc.y * sc.w);
          }
        }
      };
      switch (boundary / 8) {
        case 2: k_loop(std::integral_constant<int, 2>{}); break;
        case 4: k_loop(std::integral_constant<int, 4>{}); break;
        case 6: k_loop(std::integral_constant<int, 6>{}); break;
        case 8: k_loop(std::integral_constant<int, 8>{}); break;
        case 10: k_loop(std::integral_constant<int, 10>{}); break;
        case 12: k_loop(std::integral_constant<int, 12>{}); break;
        case 14: k_loop(std::integral_constant<int, 14>{}); break;
        default: k_loop(std::integral_constant<int, 16>{}); break;
      }
    }
    if (++stage == kT144Stages) { stage = 0; phase ^= 1; }
    // bf16 pairs straight from the fragment (the output is small next to the K loop).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h == 0 ? r0 : r1;
      if (r >= args.Mp) continue;
      uint32_t* row = reinterpret_cast<uint32_t*>(args.y + static_cast<int64_t>(r) * args.ldy + col0 + 2 * (lane % 4));
#pragma unroll
      for (int i = 0; i < 9; ++i) {
        row[4 * i] = PackBf16(out0[4 * i + 2 * h], out0[4 * i + 2 * h + 1]);
        row[36 + 4 * i] = PackBf16(out1[4 * i + 2 * h], out1[4 * i + 2 * h + 1]);
      }
    }
  }
  if constexpr (kSchedule == kPingPong) {
    if (wg == 1) PingPongWait(0);  // warpgroup 1's last pass
  }
  if constexpr (kCluster > 1) ClusterSync();
}

// A 2-d row-major tensor [rows, cols] of elem_bytes-sized elements, leading dimension ld
// elements, boxes of box_rows x box_cols, 128-byte swizzle.
CUtensorMap Map2d(const void* ptr, CUtensorMapDataType type, int elem_bytes, int64_t rows, int64_t cols, int64_t ld,
                  int box_rows, int box_cols) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * elem_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = TensorMapEncodeFn()(&map, type, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DS_CHECK(r == CUDA_SUCCESS) << "Fp8GemmWgmmaSm90: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ")";
  return map;
}

}  // namespace

namespace {
// The tile-144 form's cluster size for these params (1: none).
int ClusterOf(const Fp8GemmWgmmaSm90Params& p, int n_tiles, int grid) {
  return p.multicast == 2 && n_tiles % 2 == 0 && grid % 2 == 0 ? 2 : 1;
}
}  // namespace

int Fp8GemmWgmmaSm90ActiveClusters(const Fp8GemmWgmmaSm90Params& p) {
  if (p.form != Fp8GemmWgmmaForm::kTile144 || p.g.N % kT144N != 0) return 0;
  const int64_t Mp = Fp8PaddedM(p.g.M);
  const int n_tiles = static_cast<int>(p.g.N / kT144N);
  const int64_t tiles = (Mp + kBM - 1) / kBM * n_tiles;
  const int grid = static_cast<int>(std::min<int64_t>(tiles, CurrentDeviceProps().sms));
  const int cl = ClusterOf(p, n_tiles, grid);
  if (cl == 1) return 0;
  // (Sized with the kWhole instantiation: every schedule's consumers take the same 240-register
  // split and shared memory, so one CTA a SM either way.)
  const auto kernel = Fp8GemmTile144Kernel<kWhole, 2>;
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(kT144SmemBytes));
  return MaxActiveClusters(kernel, static_cast<unsigned>(grid), kThreads, kT144SmemBytes, static_cast<unsigned>(cl));
}

bool Fp8GemmWgmmaSm90Available() { return CurrentDeviceProps().sm90; }

std::string Fp8GemmWgmmaSm90Unsupported(const Fp8GemmWgmmaSm90Params& p) {
  const GemmFp8Params& g = p.g;
  std::ostringstream why;
  if (!CurrentDeviceProps().sm90) why << "device is not sm_90; ";
  if (g.M < 1 || g.N <= 0 || g.K <= 0 || Fp8PaddedM(g.M) > INT32_MAX || g.N > INT32_MAX || g.K > INT32_MAX)
    why << "M, N, K outside [1, 2^31); ";
  if (p.form == Fp8GemmWgmmaForm::kPanel) {
    if (g.K > kMaxKb * kBK) why << "K > 512 (the activation panel is held in shared memory); ";
    if (g.N % kBN != 0) why << "N % 128 != 0; ";
  } else if (p.form == Fp8GemmWgmmaForm::kTile144) {
    if (g.N % kT144N != 0) why << "N % 144 != 0; ";
    if (g.K > kT144MaxKb * kBK) why << "K > 16384 (the tile's weight scales are held in shared memory); ";
  } else {
    why << "form " << static_cast<int>(p.form) << "; ";
  }
  const int sched = static_cast<int>(p.schedule);
  if (sched < 0 || sched >= kNumSchedules) why << "schedule " << sched << "; ";
  if (p.schedule == Fp8GemmWgmmaSchedule::kRegisterA && p.form != Fp8GemmWgmmaForm::kPanel)
    why << "kRegisterA is for kPanel only; ";
  if (p.multicast != 0 && p.multicast != 2) why << "multicast " << p.multicast << " (0 or 2); ";
  if (p.multicast != 0 && p.form != Fp8GemmWgmmaForm::kTile144) why << "multicast is for kTile144 only; ";
  if (p.overlap_epilogue && (p.form != Fp8GemmWgmmaForm::kPanel || p.schedule == Fp8GemmWgmmaSchedule::kSplitHalves))
    why << "overlap_epilogue is for kPanel with kWhole, kPingPong, kDoubleAcc or kRegisterA only; ";
  if (p.deep_ring && (p.form != Fp8GemmWgmmaForm::kPanel || p.schedule != Fp8GemmWgmmaSchedule::kRegisterA))
    why << "deep_ring is for kPanel with kRegisterA only; ";
  if (p.double_staging && (!p.deep_ring || !p.overlap_epilogue)) why << "double_staging needs deep_ring and overlap_epilogue; ";
  if (g.xq == nullptr || g.wq == nullptr || g.y == nullptr) why << "null operand; ";
  why << Fp8GemmOperandsUnsupported(g, p.w_scales_mn, /*f32_out_ok=*/false);
  return why.str();
}

void Fp8GemmWgmmaSm90(const Fp8GemmWgmmaSm90Params& p) {
  const std::string why = Fp8GemmWgmmaSm90Unsupported(p);
  DS_CHECK(why.empty()) << "Fp8GemmWgmmaSm90: unsupported: " << why;
  const GemmFp8Params& g = p.g;
  const int64_t Mp = Fp8PaddedM(g.M);
  const int m_tiles = static_cast<int>((Mp + kBM - 1) / kBM);
  const CUtensorMap map_a = Map2d(g.xq, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, Mp, g.K, g.ldx, kBM, kBK);
  const int sms = CurrentDeviceProps().sms;
  if (p.form == Fp8GemmWgmmaForm::kTile144) {
    const int n_tiles = static_cast<int>(g.N / kT144N);
    const int64_t tiles = static_cast<int64_t>(m_tiles) * n_tiles;
    DS_CHECK(tiles < (int64_t{1} << 31)) << "Fp8GemmWgmmaSm90: too many tiles";
    const int grid = static_cast<int>(std::min<int64_t>(tiles, sms));
    // The A multicast to pairs of neighbouring column tiles of a row tile, where they stay in step.
    const int cl = ClusterOf(p, n_tiles, grid);
    const CUtensorMap map_a_t = cl > 1 ? Map2d(g.xq, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, Mp, g.K, g.ldx, kBM / cl, kBK) : map_a;
    const CUtensorMap map_b = Map2d(g.wq, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.N, g.K, g.ldw, kT144N, kBK);
    Tile144Args args{};
    args.x_scales = g.x_scales;
    args.w_scales = p.w_scales_mn;
    args.y = static_cast<__nv_bfloat16*>(g.y);
    args.ldy = g.ldy;
    args.Mp = static_cast<int>(Mp);
    args.kb = static_cast<int>(g.K / kBK);
    args.nb = static_cast<int>((g.N + 127) / 128);
    args.m_tiles = m_tiles;
    args.n_tiles = n_tiles;
    const auto pick = [&](auto cl) {
      constexpr int kCl = decltype(cl)::value;
      return p.schedule == Fp8GemmWgmmaSchedule::kSplitHalves ? Fp8GemmTile144Kernel<kSplitHalves, kCl>
             : p.schedule == Fp8GemmWgmmaSchedule::kPingPong  ? Fp8GemmTile144Kernel<kPingPong, kCl>
             : p.schedule == Fp8GemmWgmmaSchedule::kDoubleAcc ? Fp8GemmTile144Kernel<kDoubleAcc, kCl>
                                                               : Fp8GemmTile144Kernel<kWhole, kCl>;
    };
    const auto kernel = cl == 2 ? pick(std::integral_constant<int, 2>{}) : pick(std::integral_constant<int, 1>{});
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(kT144SmemBytes));
    if (cl > 1) {
      LaunchKernelWith(ClusterDimAttribute(static_cast<unsigned>(cl)), kernel, dim3(grid), dim3(kThreads), kT144SmemBytes, g.stream, map_a_t, map_b, args);
    } else {
      kernel<<<grid, kThreads, kT144SmemBytes, g.stream>>>(map_a_t, map_b, args);
    }
    DS_CUDA_CHECK_LAUNCH("Fp8GemmTile144Kernel");
    return;
  }
  const int n_tiles = static_cast<int>(g.N / kBN);
  const int64_t tiles = static_cast<int64_t>(m_tiles) * n_tiles;
  DS_CHECK(tiles < (int64_t{1} << 31)) << "Fp8GemmWgmmaSm90: too many tiles";
  const CUtensorMap map_b = Map2d(g.wq, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.N, g.K, g.ldw, kBN, kBK);
  const CUtensorMap map_y = Map2d(g.y, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, Mp, g.N, g.ldy, 64, 64);
  PanelArgs args{};
  args.x_scales = g.x_scales;
  args.w_scales = p.w_scales_mn;
  args.Mp = static_cast<int>(Mp);
  args.N = static_cast<int>(g.N);
  args.kb = static_cast<int>(g.K / kBK);
  args.n_tiles = n_tiles;
  args.panels = m_tiles;
  args.tiles = static_cast<int>(tiles);
  // Panels in step where they fit the SMs (TileSeq): parts CTAs a panel, at most one part a column tile.
  args.parts = m_tiles <= sms ? std::min(sms / m_tiles, n_tiles) : 0;
  const bool ov = p.overlap_epilogue;
  const bool deep = p.deep_ring && args.parts > 0;  // (a CTA's panel never changes)
  const auto kernel = deep && ov && p.double_staging ? Fp8GemmPanelKernel<kRegisterA, true, true, true>
                      : deep ? (ov ? Fp8GemmPanelKernel<kRegisterA, true, true> : Fp8GemmPanelKernel<kRegisterA, false, true>)
                      : p.schedule == Fp8GemmWgmmaSchedule::kSplitHalves ? Fp8GemmPanelKernel<kSplitHalves, false>
                      : p.schedule == Fp8GemmWgmmaSchedule::kPingPong
                          ? (ov ? Fp8GemmPanelKernel<kPingPong, true> : Fp8GemmPanelKernel<kPingPong, false>)
                      : p.schedule == Fp8GemmWgmmaSchedule::kDoubleAcc
                          ? (ov ? Fp8GemmPanelKernel<kDoubleAcc, true> : Fp8GemmPanelKernel<kDoubleAcc, false>)
                      : p.schedule == Fp8GemmWgmmaSchedule::kRegisterA
                          ? (ov ? Fp8GemmPanelKernel<kRegisterA, true> : Fp8GemmPanelKernel<kRegisterA, false>)
                          : (ov ? Fp8GemmPanelKernel<kWhole, true> : Fp8GemmPanelKernel<kWhole, false>);
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(kSmemBytes));
  const int grid = args.parts > 0 ? m_tiles * args.parts : static_cast<int>(std::min<int64_t>(tiles, sms));
  kernel<<<grid, kThreads, kSmemBytes, g.stream>>>(map_a, map_b, map_y, args);
  DS_CUDA_CHECK_LAUNCH("Fp8GemmPanelKernel");
}

}  // namespace ds::cuda
