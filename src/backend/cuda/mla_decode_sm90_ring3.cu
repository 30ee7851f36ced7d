// Variants 12, 13, 15 and 16 of the sm_90a absorbed-MLA decode (MlaDecodeParams::sm90_variant; 13, 15
// and 16 below at kOneFull / kLean / kMc). Variant 12: variant 10
// (the three-warpgroup kernel of mla_decode_sm90.cu with the shorter softmax and one "full"
// mbarrier per 64-column box) with a three-stage ring of 64-key tiles. Same CTA shape, split
// plan, work list, softmax, P, rescales and accumulation order as variant 10, so the same bits
// (the op tests assert 0 differing output bits against variant 10, fp32 and bf16 outputs).
//
// Why (sessions 16, 19 and 37): with two ring stages a stage is re-armed only when P V of its
// tile is done, about one softmax before S of the tile after next needs it, so most of each
// 72 KB load's latency is exposed every tile. At h128 b128 x 4K a variant-10 CTA spends ~3,950
// cycles a tile against 2,178 of tensor work; under ncu its warpgroup 0 (S and the softmax, the
// critical path) spends about a third of its S time waiting for boxes and ~30% in the softmax
// with the tensor pipe idle (session 37 run 4). A third stage lets S(t + 1) be queued ahead of
// P V(t) on nearly every tile, so the softmax of t + 1 runs under P V(t).
// Room for the third stage: Q's latent k16 steps 0-30 (columns 0-495) live in warpgroup 0's
// registers as wgmma A fragments (RS wgmma, 124 registers a thread); Q's last latent step (columns
// 496-511, 2 KB, no-swizzle layout) and its rope box (8 KB) stay in shared memory (SS). Registers
// by setmaxnreg: warpgroup 0 184, the P V warpgroups 160 each (3 x 168 = 504, one CTA of 384
// threads; 152 for P V is refused by ptxas, C7507). With all 32 latent steps in registers warpgroup
// 0 needs ~190 and ptxas serialised its wgmmas (C7512): session 38 run 1, 40-50% slower.
// (Session 16 tried the whole of Q in registers, 144 a thread: it did not fit either.)
// Shared memory (the base must be 1024-aligned: it is on sm_90, after the 1 KB the system reserves;
// checked, trap otherwise): ring [3][9 boxes of 64 x 64 bf16] 216 KB, Q's rope box 8 KB (the final
// row sums and maxima go there once every S is done), Q's step 31 2 KB, the softmax factors [3][64]
// f32, mbarriers full[3][8] (boxes 7 and 8 share one), p_full[3], empty[3], q_free (variant 16):
// 232,440 of the 232,448 bytes a CTA may have. Warpgroup 1 writes the split's LSE (from the row sums and maxima).
// The Q tile is first written (bf16, swizzled, as LoadQTile does for the other kernels) into
// stage 2, shifted by one box so that its rope box lands in its own place after the ring; warpgroup
// 0 reads its A fragments and copies step 31 from there, then stage 2 gets its first tile (tiles 0
// and 1 are issued under the Q loads, tile 2 after warpgroup 0's reads).
#include "backend/cuda/device_props.h"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/sm90_ptx.cuh"
#include "backend/cuda/wgmma_ops.cuh"
#include "backend/cuda/mla_decode.h"
#include "backend/cuda/mla_decode_sm90_common.cuh"

#include <cuda.h>

#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace ds::cuda {
namespace {

constexpr int kR3Threads = 384;
constexpr int kR3Stages = 3;
constexpr int kR3OffK = 0;                                   // [3][9 boxes]
constexpr int kR3OffQr = kR3OffK + kR3Stages * kTileBytes;   // Q's rope box [64 x 64] bf16 (at the end: row sums, maxima)
constexpr int kR3OffQStage = 2 * kTileBytes + kBoxBytes;     // the Q tile while it is staged (box 8 = kR3OffQr)
constexpr int kR3OffQ31 = kR3OffQr + kBoxBytes;              // Q's k16 step 31 (columns 496-511), no-swizzle layout
constexpr int kR3Q31Bytes = kBM * 16 * 2;                    // 2 KB
constexpr int kR3OffAlpha = kR3OffQ31 + kR3Q31Bytes;         // [3][64] f32: the factors of each stage's tile
constexpr int kR3OffL = kR3OffQr;                            // [64] f32: the final row sums (over Q's rope box)
constexpr int kR3OffM = kR3OffQr + kBM * 4;                  // [64] f32: the final row maxima (likewise)
constexpr int kR3FullBars = 8;                               // a stage's boxes 7 and 8 share one
constexpr int kR3OffBar = kR3OffAlpha + kR3Stages * kBM * 4; // full[3][8], p_full[3], empty[3]
// No alignment slack: the dynamic shared memory of a CTA starts 1024-aligned on sm_90 (after the
// 1 KB the system reserves), which the kernel checks (it traps otherwise).
constexpr int kR3OffQFree = kR3OffBar + (kR3Stages * kR3FullBars + 2 * kR3Stages) * 8;  // variant 16: q_free
constexpr int kR3SmemBytes = kR3OffQFree + 8;
static_assert(kR3SmemBytes <= 227 * 1024, "shared memory per SM");
constexpr int kR3QRegSteps = 31;                             // Q's latent k16 steps held in registers
static_assert(kR3OffQStage + 8 * kBoxBytes == kR3OffQr, "the staged Q tile's rope box lands in place");
constexpr int kR3BarWg0 = 1, kR3BarEnd = 2, kR3BarAll = 3;
constexpr int kR3RegsS = 184, kR3RegsPv = 160;  // setmaxnreg (multiples of 8)
static_assert(kR3RegsS + 2 * kR3RegsPv <= 3 * 168, "the register file of one 384-thread CTA");

// A K-major wgmma operand in the no-swizzle layout (layout type 0): lbo / sbo the byte offsets
// between core matrices adjacent in K / in M.
__device__ __forceinline__ uint64_t DescNoSwizzle(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((saddr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32);
}
__device__ __forceinline__ void StShared(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// ZeroTileTail (mla_decode_sm90_common.cuh) on a 32-bit shared address (warpgroup 0 keeps no
// 64-bit generic pointer live).
__device__ __forceinline__ void ZeroTileTailShared(uint32_t tile, int nvalid, int wtid) {
  const int nz = (kBN - nvalid) * 8;  // 16-byte pieces per box
  for (int idx = wtid; idx < kDB * nz; idx += 128) {
    const int b = idx / nz, e = idx % nz;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(tile + b * kBoxBytes + nvalid * 128 + e * 16), "r"(0)
                 : "memory");
  }
}

// The online softmax of SoftmaxTileFast (mla_decode_sm90_common.cuh) with the row maxima as
// trees of fmaxf (depth 4 over a thread's 16 scores of a row, instead of a chain of 16): fmaxf is
// exact, so the same bits, in fewer dependent steps for warpgroup 0 (one warp a scheduler, whose
// softmax is latency-bound: session 39 run 1's timeline and session 38 run 5's ncu).
__device__ __forceinline__ void SoftmaxTileTree(float (&sc)[32], int kt0, int tq, const int (&limit)[2], float sl2,
                                                float (&m_run)[2], float (&l_run)[2], float (&alpha)[2]) {
  const bool whole = __all_sync(0xffffffffu, kt0 + kBN <= limit[0] && kt0 + kBN <= limit[1]);
  if (!whole) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = kt0 + j * 8 + 2 * tq + (c & 1);
        if (key >= limit[c >> 1]) sc[j * 4 + c] = -INFINITY;
      }
  }
  float mx[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float t8[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) t8[j] = fmaxf(sc[j * 4 + 2 * hr], sc[j * 4 + 2 * hr + 1]);
#pragma unroll
    for (int j = 0; j < 4; ++j) t8[j] = fmaxf(t8[j], t8[j + 4]);
    mx[hr] = fmaxf(fmaxf(t8[0], t8[2]), fmaxf(t8[1], t8[3]));
  }
  SoftmaxExpFromMax(sc, mx, sl2, m_run, l_run, alpha);
}

// The warp's 16 x 64 block of P (bf16, the wgmma accumulator layout of sc) into a 128-byte-swizzled
// [64 x 64] box at `box` with four stmatrix.x4 (each four 8 x 8 matrices: column chunks j, j + 1 of
// rows 0-7 and 8-15) instead of sixteen 4-byte stores and their swizzled offsets. Lane L gives the
// row address of matrix L / 8 (row warp * 16 + 8 ((L / 8) & 1) + L % 8, chunk j + L / 16): the
// chunk is XORed with row % 8 = L % 8, and for even j that is j ^ ((L / 16) ^ (L % 8)).
__device__ __forceinline__ void StorePStmatrix(uint32_t box, const float (&sc)[32], int warp, int lane) {
  const int rr = lane & 7, m = lane >> 3;
  const uint32_t row = static_cast<uint32_t>(warp * 16 + (m & 1) * 8 + rr);
  uint32_t a = box + row * 128 + ((static_cast<uint32_t>((m >> 1) ^ rr)) << 4);
  asm volatile("" : "+r"(a));
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a ^ (j << 4)),
                 "r"(PackBf16(sc[j * 4 + 0], sc[j * 4 + 1])), "r"(PackBf16(sc[j * 4 + 2], sc[j * 4 + 3])),
                 "r"(PackBf16(sc[j * 4 + 4], sc[j * 4 + 5])), "r"(PackBf16(sc[j * 4 + 6], sc[j * 4 + 7]))
                 : "memory");
  }
}

// kOneFull (variant 13): one "full" mbarrier a stage (all nine boxes) instead of one a box: with
// three stages a tile has nearly always landed by the time its S is issued, and each mbarrier
// test costs warpgroup 0 a round trip (session 38 run 5, ncu: its box waits and landed-tests, 17
// mbarrier instructions a tile, took ~21% of its samples at h128 b128 x 4K).
// (Measured and removed, session 38 runs 4 and 6: P handed to the P V warpgroups only once S(t + 1)
// completed, on variant 12 and on 13; within noise or slower.)
// kTl (MlaDecodeParams::sm90_timeline set, a measurement hook): CTA 0's first thread of each
// warpgroup records (event, clock64) pairs at the points named by the kR3Tl* events below, up to
// kR3TlMax a warpgroup, into sm90_timeline[warpgroup][2 * kR3TlMax] (bench kernels with
// DS_BENCH_MLA_TIMELINE=1 prints the mean gaps and one window of tiles across the warpgroups).
constexpr int kR3TlMax = 1024;
// Warpgroup 0: loop top, S(it) complete, softmax done, P + factors stored, p_full decided (before
// S(it + 1) is issued), S(it + 1) issued. P V warpgroup (+20 for warpgroup 1, +40 for 2): loop top,
// V boxes landed, P ready, P V issued, P V complete, stage released (the producer: tile re-armed).
enum : int { kTlTop = 0, kTlSDone, kTlSoftmax, kTlPStored, kTlPub, kTlSIssued,
             kTlPvTop = 0, kTlPvV, kTlPvP, kTlPvIssued, kTlPvDone, kTlPvReleased };
// kLean (variant 15, with kOneFull): warpgroup 0's softmax with tree maxima (SoftmaxTileTree) and P
// stored by stmatrix (StorePStmatrix); the P V warpgroups skip the rescale of O when every factor
// of the warp's rows is exactly 1 (the running maxima did not move: x * 1 = x, the same bits). At
// 128 heads warpgroup 0's softmax and P store took ~1,500 of ~3,200 cycles a tile, latency-bound
// and sharing the schedulers with the P V warpgroups' 128 rescale multiplies a thread (session 39
// run 1). Run 2: the softmax ~990 cycles instead of ~1,185, 3,191-3,205 cycles a tile against
// 3,249-3,265 (-2%). (Measured and removed, run 3: the next tile's landed test issued before the
// softmax and read after it; 3,282-3,332 cycles a tile.)
// kMc (variant 16, with kOneFull and kLean): the two 64-row CTAs of a token (row blocks 2 i and
// 2 i + 1 of one work item: the same sequence, split and keys) run as a cluster of two, and each K
// tile crosses L2 once a pair: CTA rank r loads the boxes b with b % 2 == r and multicasts them into
// both CTAs (the same offsets; each CTA's one "full" mbarrier a stage expects the whole tile). A stage
// is re-armed once all 16 P V warps of both CTAs released it (lanes 0 and 1 of each warp arrive on
// the two CTAs' "empty" barriers in parallel, the form session 17's FP8 GEMM multicast needed), and
// tile 2 (stage 2, where the Q tile is staged) once both warpgroups 0 have read their Q (q_free, one
// arrival from each CTA). Cluster barriers open (every mbarrier initialised before a multicast or a
// remote arrival lands) and close the kernel (no CTA leaves while its peer may still arrive on its
// barriers). Only for heads % 128 == 0 (the launcher runs 15 otherwise), where both CTAs of a pair
// have rows or neither has. The same bits as 15 (the same data in shared memory, the same
// arithmetic). Why: at 128 heads the two CTAs of a token read each K tile from L2 (session 38 run 5,
// ncu: L2 72% busy), and the decode runs at the 700 W cap (session 40: the clock follows the work
// done per second), so the bytes moved per tile are part of the time. Session 16's multicast
// (variant 3, removed) ran on the two-stage ring with a chain of remote arrivals from one lane.
template <typename TOut, bool kOneFull = false, bool kTl = false, bool kLean = false, bool kMc = false>
__global__ void __launch_bounds__(kR3Threads, 1)
    MlaDecodeSm90Ring3Kernel(const __grid_constant__ CUtensorMap kv_map, const MlaDecodeParams p, int nrb, int chunk,
                             int max_splits, int direct) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  const uint32_t s_base = SmemAddr(smem);
  if ((s_base & 1023u) != 0) __trap();  // the swizzled boxes need a 1024-aligned base (see kR3SmemBytes)
  const uint32_t sQr = s_base + kR3OffQr, sK = s_base + kR3OffK;
  float* s_alpha = reinterpret_cast<float*>(smem + kR3OffAlpha);
  float* s_l = reinterpret_cast<float*>(smem + kR3OffL);
  float* s_m = reinterpret_cast<float*>(smem + kR3OffM);
  const uint32_t bar_full = s_base + kR3OffBar, bar_pfull = bar_full + kR3Stages * kR3FullBars * 8,
                 bar_empty = bar_pfull + kR3Stages * 8;
  // The "full" mbarrier of box b of stage st (boxes 7 and 8 share the last).
  auto full_bar = [&](int st, int b) {
    return bar_full + (st * kR3FullBars + (kOneFull ? 0 : min(b, kR3FullBars - 1))) * 8;
  };
  constexpr int kFullUsed = kOneFull ? 1 : kR3FullBars;  // "full" barriers in use a stage

  const int tid = threadIdx.x, wtid = tid & 127;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform
  const int warp = wtid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  long long* const cta_times = CtaTimesEntry(p, tid);  // the measurement hook (MlaDecodeParams::sm90_cta_times)
  const CtaWork w = GetCtaWork(p, nrb, chunk, max_splits);
  // kMc: both CTAs of a pair must leave here together (a CTA that left would hang its peer in the
  // cluster barriers): they do when a sequence's rows fill whole pairs (valid_rows % 128 == 0, which
  // the launcher's heads % 128 == 0 gives); trap otherwise rather than hang.
  if constexpr (kMc) {
    if (w.valid_rows % (2 * kBM) != 0) __trap();
  }
  if (!CtaHasWork<TOut, kR3Threads>(p, w, tid, max_splits, direct)) return;
  const int s = w.s, H = w.H, q0 = w.q0;
  const int valid_rows = w.valid_rows, row0 = w.row0, kbeg = w.kbeg, kend = w.kend;
  const int ntiles = (kend - kbeg + kBN - 1) / kBN;
  int tl_n = 0;
  const auto stamp = [&](int ev) {
    if constexpr (kTl) {
      if (blockIdx.x == 0 && wtid == 0 && tl_n < kR3TlMax) {
        long long* row = p.sm90_timeline + static_cast<int64_t>(wg) * 2 * kR3TlMax + 2 * tl_n++;
        row[0] = ev + 20 * wg;
        row[1] = static_cast<long long>(clock64());
      }
    }
  };
  static_assert(!kMc || (kOneFull && kLean), "variant 16 is 15 with the multicast");
  const KvL2Pol kv_l2 = KvL2Policy(p.sm90_kv_l2_hint);
  const uint32_t mc_rank = kMc ? ClusterRank() : 0u;
  auto issue_tile = [&](int it) {  // tile `it` -> stage it % 3, one "full" mbarrier a box (kOneFull: a stage)
    const int32_t* bt = p.block_table + static_cast<int64_t>(s) * p.max_blocks;
    const int bs = static_cast<int>(p.block_size);
    const int k0 = kbeg + it * kBN;
    const int row = bt[k0 / bs] * bs + k0 % bs;
    const int st = it % kR3Stages;
    if constexpr (kMc) {  // this CTA's boxes, into both CTAs; its own barrier expects the whole tile
      BarExpectTx(full_bar(st, 0), kTileBytes);
#pragma unroll
      for (int b = static_cast<int>(mc_rank); b < kDB; b += 2)
        TmaLoadMulticast(sK + st * kTileBytes + b * kBoxBytes, &kv_map, b * 64, row, full_bar(st, b), 0x3);
    } else {
#pragma unroll
      for (int b = 0; b < kFullUsed; ++b)
        BarExpectTx(full_bar(st, b), kOneFull ? kTileBytes : (b == kR3FullBars - 1 ? 2 * kBoxBytes : kBoxBytes));
#pragma unroll
      for (int b = 0; b < kDB; ++b)
        TmaLoadBox(sK + st * kTileBytes + b * kBoxBytes, &kv_map, b * 64, row, full_bar(st, b), kv_l2);
    }
  };

  if (tid == 0) {
    for (int i = 0; i < kR3Stages * kR3FullBars; ++i) BarInit(bar_full + i * 8, 1);
#pragma unroll
    for (int st = 0; st < kR3Stages; ++st) {
      BarInit(bar_pfull + st * 8, 128);
      BarInit(bar_empty + st * 8, kMc ? 2 * 8 : 256);  // kMc: one arrival a P V warp of each CTA
    }
    if constexpr (kMc) BarInit(s_base + kR3OffQFree, 2);  // each CTA's warpgroup 0 has read its Q
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  if constexpr (kMc) ClusterSync();  // both CTAs' barriers initialised before any multicast or remote arrival
  else NamedBarSync(kR3BarAll, kR3Threads);
  // Q tile -> bf16 swizzled boxes staged in stage 2 (one batch of loads); thread 0 issues tiles 0
  // and 1 under its own Q loads.
  LoadQTile<kR3Threads, kBM * (kD / 4) / kR3Threads>(p, smem + kR3OffQStage, tid, row0, valid_rows, q0, H, [&] {
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&kv_map)) : "memory");
      for (int it = 0; it < min(2, ntiles); ++it) issue_tile(it);
    }
  });
  FenceProxyAsync();  // generic-proxy writes of Q's rope box -> visible to wgmma
  NamedBarSync(kR3BarAll, kR3Threads);
  if (cta_times != nullptr && tid == 0) cta_times[7] = clock64();
  const int my_row[2] = {warp * 16 + g, warp * 16 + g + 8};  // in the CTA's 64-row tile

  // The register split after the shared prologue: ptxas keeps this pair (the P V warpgroups
  // cannot go below 160: 152 is ignored, C7507).
  if (wg == 0) {
    // ---------------- WG0: S = Q K^T, softmax, P ----------------
    RegAlloc<kR3RegsS>();
    // Q's latent columns as RS A fragments (k16 step ks: rows g / g + 8 of this warp's 16,
    // columns 16 ks + 2 tq (+ 8)), read from the staged tile.
    uint32_t qa[kR3QRegSteps][4];
#pragma unroll
    for (int ks = 0; ks < kR3QRegSteps; ++ks)
#pragma unroll
      for (int f = 0; f < 4; ++f)
        qa[ks][f] = *reinterpret_cast<const uint32_t*>(smem + kR3OffQStage + (ks >> 2) * kBoxBytes +
                                                       SwzOff(my_row[f & 1], 16 * (ks & 3) + 2 * tq + 8 * (f >> 1)));
    // The last latent k16 step (columns 496-511) stays in shared memory for SS wgmma, in the
    // no-swizzle K-major layout: 8-row x 16-byte core matrices, K-adjacent 128 bytes apart (LBO),
    // row-group-adjacent 256 bytes apart (SBO). Thread wtid copies row wtid / 2, 8 columns.
    {
      const int r = wtid >> 1, kc = wtid & 1;
      const uint4 v = *reinterpret_cast<const uint4*>(smem + kR3OffQStage + 7 * kBoxBytes + SwzOff(r, 48 + 8 * kc));
      *reinterpret_cast<uint4*>(smem + kR3OffQ31 + (r >> 3) * 256 + kc * 128 + (r & 7) * 16) = v;
    }
    FenceProxyAsync();  // these generic reads before the async-proxy (TMA) writes of tile 2
    NamedBarSync(kR3BarWg0, 128);
    if constexpr (kMc) {  // stage 2 is free in this CTA: tell both; tile 2 once the peer's is free too
      if (wtid < 2) BarArriveCluster(MapToRank(s_base + kR3OffQFree, static_cast<uint32_t>(wtid)));
      if (wtid == 0 && ntiles > 2) {
        MbarWait(s_base + kR3OffQFree, 0);
        issue_tile(2);
      }
    } else {
      if (wtid == 0 && ntiles > 2) issue_tile(2);
    }
    if (cta_times != nullptr && tid == 0) cta_times[2] = clock64();
    int limit[2];
    float m_run[2], l_run[2];
    InitRowState(w, my_row, limit, m_run, l_run);
    const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scores in base 2
    float sc[32];
    // Tile `it` (rows past the context zeroed in shared memory), then S(it) issued box by box.
    auto issue_s = [&](int it) {
      const int st = it % kR3Stages;
      const uint32_t par = static_cast<uint32_t>((it / kR3Stages) & 1);
      const int nvalid = kend - (kbeg + it * kBN);
      if (nvalid < kBN) {  // the last, partial tile: every box landed, rows past the context zeroed
        for (int b = 0; b < kFullUsed; ++b) MbarWait(full_bar(st, b), par);
        ZeroTileTailShared(sK + st * kTileBytes, nvalid, wtid);
        FenceProxyAsync();
        NamedBarSync(kR3BarWg0, 128);
      }
      uint64_t dq = DescKMajor(sQr, 0), dk = DescKMajor(sK + st * kTileBytes, 0);
      uint64_t dq31 = DescNoSwizzle(s_base + kR3OffQ31, 128, 256);
      asm volatile("" : "+l"(dq), "+l"(dk), "+l"(dq31));
      FenceRegs(sc);
      WgFence();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        if ((ks & 3) == 0 && (!kOneFull || ks == 0) && ks < 32) {  // box ks / 4 landed (a partial tile: all waited above)
          MbarWait(full_bar(st, ks >> 2), par);
          __syncwarp();
          WgFence();
        }
        const uint64_t offk = static_cast<uint64_t>(((ks >> 2) * kBoxBytes + (ks & 3) * 32) >> 4);
        if (ks < kR3QRegSteps) WgmmaBf16Rs(sc, qa[ks], dk + offk, ks > 0 ? 1 : 0);
        else if (ks < 32) WgmmaQK(sc, dq31, dk + offk, 1);
        else WgmmaQK(sc, dq + static_cast<uint64_t>(((ks & 3) * 32) >> 4), dk + offk, 1);
      }
      WgCommit();
    };
    auto tile_landed = [&](int it) {  // every box of tile `it`, without waiting
      const int st = it % kR3Stages;
      const uint32_t par = static_cast<uint32_t>((it / kR3Stages) & 1);
      bool ok = true;
#pragma unroll
      for (int b = 0; b < kFullUsed; ++b) ok = ok && BarTestWait(full_bar(st, b), par);
      return ok;
    };
    stamp(kTlPub);
    issue_s(0);
    stamp(kTlSIssued);
    for (int it = 0; it < ntiles; ++it) {
      const int st = it % kR3Stages;
      stamp(kTlTop);
      WgWait<0>();
      FenceRegs(sc);
      stamp(kTlSDone);
      const int kt0 = kbeg + it * kBN;
      float alpha[2];
      if constexpr (kLean) SoftmaxTileTree(sc, kt0, tq, limit, sl2, m_run, l_run, alpha);
      else SoftmaxTileFast(sc, kt0, tq, limit, sl2, m_run, l_run, alpha);
      stamp(kTlSoftmax);
      // P (bf16) into the tile's rope box, the factors into the stage's slot. The swizzled
      // offsets are formed here from an opaque row (not 16 offsets hoisted out of the loop into
      // registers that warpgroup 0 does not have).
      // (32-bit shared addresses: no 64-bit generic pointers live in warpgroup 0.)
      const uint32_t pbox = sK + st * kTileBytes + 8 * kBoxBytes;
      int prow = my_row[0];
      asm volatile("" : "+r"(prow));
      if constexpr (kLean) {
        StorePStmatrix(pbox, sc, warp, lane);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr)
            StShared(pbox + SwzOff(prow + 8 * hr, j * 8 + 2 * tq), PackBf16(sc[j * 4 + 2 * hr], sc[j * 4 + 2 * hr + 1]));
      }
      if (tq == 0) {
        const uint32_t sa = s_base + kR3OffAlpha + (st * kBM + prow) * 4;
        StShared(sa, __float_as_uint(alpha[0]));
        StShared(sa + 8 * 4, __float_as_uint(alpha[1]));
      }
      FenceProxyAsync();
      stamp(kTlPStored);
      // S(it + 1) queued ahead of P V(it) when its tile has landed (as variant 10; with three
      // stages it nearly always has). Only the arrive moves (one wgmma call site).
      const bool has_next = it + 1 < ntiles;
      const bool next_ready = has_next && __shfl_sync(0xffffffffu, tile_landed(it + 1) ? 1 : 0, 0) != 0;
      if (!next_ready) BarArrive(bar_pfull + st * 8);
      stamp(kTlPub);
      if (has_next) issue_s(it + 1);
      stamp(kTlSIssued);
      if (next_ready) BarArrive(bar_pfull + st * 8);
    }
    WgWait<0>();
    FenceRegs(sc);
    // Row sums over the quad and the row maxima into shared memory (over Q's rope box, which no
    // wgmma reads any more once every warp of this warpgroup is past its last S): WG1 normalises
    // with them and writes the split's LSE (so that warpgroup 0 keeps none of the CTA's output
    // bookkeeping live).
    NamedBarSync(kR3BarWg0, 128);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
      l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
      if (tq == 0) {
        StShared(s_base + kR3OffL + my_row[hr] * 4, __float_as_uint(l_run[hr]));
        StShared(s_base + kR3OffM + my_row[hr] * 4, __float_as_uint(m_run[hr]));
      }
    }
    NamedBarSync(kR3BarEnd, kR3Threads);
  } else {
  // ---------------- WG1 / WG2: O[:, 256 (wg - 1) ..] += P V; WG1's first thread re-arms stages ----------------
  RegDealloc<kR3RegsPv>();
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  const int half = wg - 1;
  for (int it = 0; it < ntiles; ++it) {
    const int st = it % kR3Stages;
    const uint32_t par = static_cast<uint32_t>((it / kR3Stages) & 1);
    stamp(kTlPvTop);
#pragma unroll
    for (int b = 0; b < (kOneFull ? 1 : 4); ++b) MbarWait(full_bar(st, 4 * half + b), par);  // this warpgroup's V boxes
    stamp(kTlPvV);
    MbarWait(bar_pfull + st * 8, par);  // P and the factors of tile `it` (and its zeroed rows) ready
    stamp(kTlPvP);
    const float a0 = s_alpha[st * kBM + my_row[0]], a1 = s_alpha[st * kBM + my_row[1]];
    if (!kLean || !__all_sync(0xffffffffu, a0 == 1.f && a1 == 1.f)) ScaleAcc(acc, a0, a1);
    const uint32_t kt = sK + st * kTileBytes;
    // Base descriptors opaque, per-step offsets added (few live registers beside O's 128).
    uint64_t dp = DescKMajor(kt + 8 * kBoxBytes, 0), dv = DescV(kt, 4 * half, 0);
    asm volatile("" : "+l"(dp), "+l"(dv));
    FenceRegs(acc);
    WgFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) WgmmaPVss(acc, dp + static_cast<uint64_t>((kk * 32) >> 4), dv + static_cast<uint64_t>((kk * 2048) >> 4), 1);
    WgCommit();
    stamp(kTlPvIssued);
    WgWait<0>();
    FenceRegs(acc);
    stamp(kTlPvDone);
    if constexpr (kMc) {  // lane q of each warp arrives on CTA q's barrier (in parallel)
      __syncwarp();
      if (lane < 2) BarArriveCluster(MapToRank(bar_empty + st * 8, static_cast<uint32_t>(lane)));
    } else {
      BarArrive(bar_empty + st * 8);
    }
    if (half == 0 && wtid == 0 && it + kR3Stages < ntiles) {
      MbarWait(bar_empty + st * 8, par);  // both P V warpgroups (kMc: of both CTAs) released the stage (WG0's use ended before p_full)
      issue_tile(it + kR3Stages);
    }
    stamp(kTlPvReleased);
    __syncwarp();
  }
  NamedBarSync(kR3BarEnd, kR3Threads);
  StoreRows<TOut>(p, w, acc, my_row, s_l, tq, half * 256, direct, max_splits);
  if (half == 0 && !direct && tq == 0) {
    const float m_fin[2] = {s_m[my_row[0]], s_m[my_row[1]]}, l_fin[2] = {s_l[my_row[0]], s_l[my_row[1]]};
    WriteRowLse(p, w, my_row, m_fin, l_fin, max_splits);
  }
  if (tid == 128) CtaTimesExit(cta_times, ntiles);
  }  // P V warpgroups
  if constexpr (kMc) ClusterSync();  // no CTA leaves while its peer may still arrive on its barriers
}

using Ring3KernelFn = void (*)(const CUtensorMap, const MlaDecodeParams, int, int, int, int);

// Whether clusters of two ring-kernel CTAs (232 KB of shared memory each) can be resident on this
// device (cudaOccupancyMaxActiveClusters > 0; e.g. not under a partition that leaves no pair of SMs
// in one GPC). Per device, cached; asked of the bf16-output instantiation (the fp32 one has the same
// threads, registers and shared memory, which the launcher checks).
bool Ring3ClustersFit() {
  static std::atomic<int> fit[64];  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  std::atomic<int>& f = fit[dev & 63];
  if (const int v = f.load(std::memory_order_acquire); v != 0) return v == 1;
  const auto kernel = MlaDecodeSm90Ring3Kernel<__nv_bfloat16, true, false, true, true>;
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(kR3SmemBytes));
  const int n = MaxActiveClusters(kernel, 2, kR3Threads, kR3SmemBytes, 2);
  f.store(n > 0 ? 1 : 2, std::memory_order_release);
  return n > 0;
}
// The instantiation for variant v (12, 13, 15, 16; the timeline hook runs 16's schedule for 16, 15's for
// 15, 13's otherwise).
template <typename TOut>
Ring3KernelFn PickRing3Kernel(int v, bool tl) {
  if (tl)
    return v == 16   ? MlaDecodeSm90Ring3Kernel<TOut, true, true, true, true>
           : v == 15 ? MlaDecodeSm90Ring3Kernel<TOut, true, true, true>
                     : MlaDecodeSm90Ring3Kernel<TOut, true, true>;
  return v == 16   ? MlaDecodeSm90Ring3Kernel<TOut, true, false, true, true>
         : v == 15 ? MlaDecodeSm90Ring3Kernel<TOut, true, false, true>
         : v == 13 ? MlaDecodeSm90Ring3Kernel<TOut, true>
                   : MlaDecodeSm90Ring3Kernel<TOut, false>;
}

}  // namespace

void LaunchMlaDecodeSm90Ring3(const CUtensorMap& map, const MlaDecodeParams& p, int nrb, int chunk, int max_splits,
                              int direct, unsigned ctas) {
  const bool f32 = p.out_type == DTypeOut::kF32;
  // Variant 16's pairs need both row blocks of a token to have rows or neither (heads % 128 == 0;
  // then nrb is even and the pairs are the (2 i, 2 i + 1) CTAs of one work item), and clusters of two
  // of these CTAs that the device can schedule; 15 otherwise.
  const bool mc = p.sm90_variant == 16 && p.heads % 128 == 0 && nrb % 2 == 0 && Ring3ClustersFit();
  const int v = p.sm90_variant == 16 && !mc ? 15 : p.sm90_variant;
  const bool tl = p.sm90_timeline != nullptr;  // the measurement hook
  const Ring3KernelFn kernel = f32 ? PickRing3Kernel<float>(v, tl) : PickRing3Kernel<__nv_bfloat16>(v, tl);
  // The setmaxnreg split (184 + 2 x 160) balances only at 168 registers a thread, and the layout
  // leaves no room for static shared memory (the dynamic base must stay 1024-aligned): checked once
  // per (output type, variant, timeline), so a toolchain that compiles it otherwise fails here, not
  // with a hang or trap.
  static std::atomic<bool> checked[2][2][4];
  std::atomic<bool>& done = checked[f32 ? 1 : 0][tl ? 1 : 0][v == 16 ? 3 : v == 15 ? 2 : v - 12];
  if (!done.load(std::memory_order_acquire)) {
    cudaFuncAttributes attr{};
    DS_CUDA_CHECK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel)));
    DS_CHECK(attr.numRegs == 168 && attr.sharedSizeBytes == 0)
        << "MlaDecodeSm90Ring3Kernel" << (tl ? " (timeline)" : "") << ": compiled to " << attr.numRegs
        << " registers a thread and " << attr.sharedSizeBytes << " B of static shared memory (needs 168 and 0)";
    done.store(true, std::memory_order_release);
  }
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(kR3SmemBytes));
  if (mc) {
    DS_CHECK(ctas % 2 == 0) << "MlaDecodeSm90Ring3Kernel (variant 16): an odd grid " << ctas;
    cudaLaunchAttribute attrs[2] = {ClusterDimAttribute(2), {}};
    const unsigned n = AddPdlAttribute(attrs, 1, p.pdl);
    DS_CUDA_CHECK(LaunchWithAttrs(attrs, n, kernel, dim3(ctas), dim3(kR3Threads), kR3SmemBytes, p.stream, map, p, nrb,
                                  chunk, max_splits, direct));
  } else {
    LaunchKernel(kernel, ctas, kR3Threads, kR3SmemBytes, p.stream, p.pdl, map, p, nrb, chunk, max_splits, direct);
  }
  DS_CUDA_CHECK_LAUNCH(tl ? "MlaDecodeSm90Ring3Kernel (timeline)" : "MlaDecodeSm90Ring3Kernel");
}

}  // namespace ds::cuda
