// sm_90a absorbed-MLA decode (wgmma + TMA), see mla_decode.h (MlaDecodeParams::sm90) and
// docs/design/cuda_backend.md ("MLA decode on sm_90a: wgmma + TMA"). Verified on the H200 (session 3).
//
// One CTA = one sequence x one tile of 64 query rows (row = query token i * heads + head, so the
// 128 heads of one token are two tiles) x one KV split of `chunk` keys (a multiple of 64: every
// 64-key tile is one page of the paged latent cache, block_size % 64 == 0). 256 threads = two
// warpgroups, one CTA per SM (~225 KB of shared memory):
//   shared memory: Q [64 x 576] bf16 (written once by all threads from the fp32 q), a 2-stage
//   ring of K tiles [64 keys x 576] bf16 loaded by TMA (9 boxes of 64 x 64, 128-byte swizzle;
//   V = the first 512 columns of the same rows, so K and V share the ring), P [64 x 64] bf16.
//   WG0: S = Q K^T (36 x wgmma m64n64k16, both operands in shared memory), the online softmax
//        in fp32 (base 2, FlashMLA's / mla_decode_tc.cu's numerics), P rounded to bf16 kept in
//        registers as the A operand of O[:, 0:256] += P V (wgmma m64n256k16, A from registers,
//        V MN-major from the ring), and P + the rescale factors written to shared memory;
//        its O += P V of tile i overlaps its S of tile i + 1 (two wgmma groups in flight).
//   WG1: O[:, 256:512] += P V from the shared P (wgmma m64n256k16, both from shared memory);
//        its first thread is the TMA producer (the first two tiles, then it re-arms a stage when
//        both warpgroups have released it: an mbarrier per stage for "full" (TMA bytes) and
//        "empty" (256 arrivals)).
// Hand-offs between the warpgroups: named barriers (P full / P empty). The last, partial tile
// of a sequence has its rows past the context zeroed in shared memory before any wgmma reads
// it (unused cache rows may hold anything, NaN included; P = 0 there, but 0 * NaN = NaN).
// Split-KV by work (Sm90Plan: one chunk for the batch from a wave-cost model), the partials go
// to the workspace with their LSE and MlaDecodeSm90Combine merges them; one split = direct
// write. The CUDA-core emulation (emulate_tc_rounding with sm90 = true) follows this plan
// (MlaDecodeTcChunk -> MlaDecodeSm90Chunk, 64 keys per online-softmax update).
// MlaDecodeParams::sm90_variant (A/B, nothing selects them by default): 1 / 2 the "seesaw"
// kernel below (MlaDecodeSm90SeesawKernel; same plan and numerics, S and the softmax alternate
// between the warpgroups; 1 and 2 differ in when a ring stage is released; 3-8% slower,
// session 5); 4 the three-warpgroup kernel (MlaDecodeSm90Wg3Kernel); 8 / 9 = 4 / this kernel
// with the shorter softmax (SoftmaxTileFast); 10 = 8 with per-box "full" barriers (session 16;
// 3 and 5-7 were measured there and removed); 11 the tile-pair schedule (mla_decode_sm90_pair.cu,
// session 19); 12 = 10 with a three-stage ring, Q's latent part in warpgroup 0's registers, 13 = 12
// with a barrier a stage (mla_decode_sm90_ring3.cu, session 38), 15 = 13 with the lean softmax
// (session 39).
#include "backend/cuda/device_props.h"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/sm90_ptx.cuh"
#include "backend/cuda/wgmma_ops.cuh"
#include "backend/cuda/mla_decode.h"
#include "backend/cuda/mla_decode_merge.cuh"
#include "backend/cuda/mla_decode_sm90_common.cuh"
#include "backend/cuda/mla_decode_uv.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace ds::cuda {
namespace {


// kFastSm (variant 9): the shorter softmax (SoftmaxTileFast).
template <typename TOut, bool kFastSm = false>
__global__ void __launch_bounds__(kThreads, 1)
    MlaDecodeSm90Kernel(const __grid_constant__ CUtensorMap kv_map, const MlaDecodeParams p, int nrb, int chunk,
                        int max_splits, int direct) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u);  // (stays a shared-space pointer)
  const uint32_t s_base = SmemAddr(smem);
  const uint32_t sQ = s_base + kOffQ, sK = s_base + kOffK, sP = s_base + kOffP;
  float* s_alpha = reinterpret_cast<float*>(smem + kOffAlpha);
  float* s_l = reinterpret_cast<float*>(smem + kOffL);
  const uint32_t bar_full = s_base + kOffBar, bar_empty = bar_full + kStages * 8;

  const int tid = threadIdx.x, wtid = tid & 127;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform for the compiler (wgmma paths)
  const int warp = wtid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const CtaWork w = GetCtaWork(p, nrb, chunk, max_splits);
  direct = direct || w.direct;  // a work list's one-split sequence writes its output itself
  const int s = w.s, H = w.H, q0 = w.q0;
  const int valid_rows = w.valid_rows, row0 = w.row0, kbeg = w.kbeg, kend = w.kend;
  if (row0 >= valid_rows) return;  // rows that do not exist (shorter query block): no outputs
  if (kbeg >= kend) {  // an empty split
    WriteEmptySplit<TOut, kThreads>(p, w, tid, max_splits, direct);
    return;
  }
  const int ntiles = (kend - kbeg + kBN - 1) / kBN;
  const int32_t* bt = p.block_table + static_cast<int64_t>(s) * p.max_blocks;
  const int bs = static_cast<int>(p.block_size);
  const KvL2Pol kv_l2 = KvL2Policy(p.sm90_kv_l2_hint);  // (A/B: MlaDecodeParams::sm90_kv_l2_hint)
  // Producer: tile `it` (64 keys from kbeg + 64 it, one page) into stage it % kStages.
  auto issue_tile = [&](int it) {
    const int k0 = kbeg + it * kBN;
    const int row = bt[k0 / bs] * bs + k0 % bs;
    const int st = it % kStages;
    const uint32_t bar = bar_full + st * 8;
    BarExpectTx(bar, kTileBytes);
#pragma unroll
    for (int b = 0; b < kDB; ++b) TmaLoadBox(sK + st * kTileBytes + b * kBoxBytes, &kv_map, b * 64, row, bar, kv_l2);
  };

  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      BarInit(bar_full + st * 8, 1);
      BarInit(bar_empty + st * 8, kThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  __syncthreads();
  if (tid == 128) {  // the producer (WG1's first thread): the first stages, overlapping the Q load
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&kv_map)) : "memory");
    for (int it = 0; it < min(kStages, ntiles); ++it) issue_tile(it);
  }
  // Q tile -> bf16, swizzled boxes (rows past the query block: zeros). 16-byte loads.
  LoadQTile(p, smem, tid, row0, valid_rows, q0, H);
  FenceProxyAsync();  // generic-proxy writes of Q -> visible to wgmma (async proxy)
  __syncthreads();

  // O accumulator: this warpgroup's 256 value columns, rows 16 warp + g (+ 8) per thread;
  // element 4 j + c is column 8 j + 2 tq + (c & 1) of row half c >> 1.
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  const int my_row[2] = {warp * 16 + g, warp * 16 + g + 8};  // in the CTA's 64-row tile

  if (wg == 0) {
    // ---------------- WG0: S = Q K^T, softmax, P, O[:, 0:256] ----------------
    int limit[2];
    float m_run[2], l_run[2];
    InitRowState(w, my_row, limit, m_run, l_run);
    const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scores in base 2
    float sc[32];
    uint32_t pa[16];
    // Before any wgmma reads a freshly landed tile: its rows past the context are zeroed.
    auto prepare_tile = [&](int it) {
      MbarWait(bar_full + (it % kStages) * 8, (it / kStages) & 1);
      const int nvalid = kend - (kbeg + it * kBN);
      if (nvalid < kBN) {
        ZeroTileTail(smem + kOffK + (it % kStages) * kTileBytes, nvalid, wtid);
        FenceProxyAsync();
        NamedBarSync(kBarWg0, 128);
      }
    };
    auto issue_s = [&](int it) {
      const uint32_t kt = sK + (it % kStages) * kTileBytes;
      // Base descriptors made opaque here, so the compiler adds the per-step offsets (16-byte
      // units, into the start-address field) instead of keeping 72 loop-invariant descriptors
      // in registers.
      uint64_t dq = DescKMajor(sQ, 0), dk = DescKMajor(kt, 0);
      asm volatile("" : "+l"(dq), "+l"(dk));
      FenceRegs(sc);
      WgFence();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        const uint64_t off = static_cast<uint64_t>(((ks >> 2) * kBoxBytes + (ks & 3) * 32) >> 4);
        WgmmaQK(sc, dq + off, dk + off, ks > 0 ? 1 : 0);
      }
      WgCommit();
    };
    prepare_tile(0);
    issue_s(0);
    WgWait<0>();
    FenceRegs(sc);
    for (int it = 0; it < ntiles; ++it) {
      // Online softmax of tile `it` (row g / g + 8: 16 scores per thread, the rest in its quad).
      const int kt0 = kbeg + it * kBN;
      float alpha[2];
      if constexpr (kFastSm) {
        SoftmaxTileFast(sc, kt0, tq, limit, sl2, m_run, l_run, alpha);
      } else {
        SoftmaxTile(sc, kt0, tq, limit, sl2, m_run, l_run, alpha);
      }
      // P in bf16: the A fragments of the four k16 steps (keys 16 kk .. 16 kk + 15).
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        pa[kk * 4 + 0] = PackBf16(sc[(2 * kk) * 4 + 0], sc[(2 * kk) * 4 + 1]);
        pa[kk * 4 + 1] = PackBf16(sc[(2 * kk) * 4 + 2], sc[(2 * kk) * 4 + 3]);
        pa[kk * 4 + 2] = PackBf16(sc[(2 * kk + 1) * 4 + 0], sc[(2 * kk + 1) * 4 + 1]);
        pa[kk * 4 + 3] = PackBf16(sc[(2 * kk + 1) * 4 + 2], sc[(2 * kk + 1) * 4 + 3]);
      }
      // Hand P and the rescale factors to WG1 (after it finished reading the previous ones).
      if (it > 0) NamedBarSync(kBarPEmpty, kThreads);
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
          *reinterpret_cast<uint32_t*>(smem + kOffP + SwzOff(my_row[hr], j * 8 + 2 * tq)) =
              pa[(j >> 1) * 4 + (j & 1) * 2 + hr];
      if (tq == 0) {
        s_alpha[my_row[0]] = alpha[0];
        s_alpha[my_row[1]] = alpha[1];
      }
      FenceProxyAsync();
      NamedBarArrive(kBarPFull, kThreads);
      // O[:, 0:256] = alpha O + P V (the previous P V completed: waited below last iteration).
      ScaleAcc(acc, alpha[0], alpha[1]);
      const uint32_t kt = sK + (it % kStages) * kTileBytes;
      FenceRegs(acc);
      FenceRegs(pa);
      WgFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        WgmmaPVrs(acc, pa[kk * 4 + 0], pa[kk * 4 + 1], pa[kk * 4 + 2], pa[kk * 4 + 3], DescV(kt, 0, kk));
      WgCommit();
      if (it + 1 < ntiles) {  // S of the next tile overlaps this P V
        prepare_tile(it + 1);
        issue_s(it + 1);
        WgWait<1>();  // P V of tile `it` done
        BarArrive(bar_empty + (it % kStages) * 8);  // WG0 is done with this stage
        WgWait<0>();
        FenceRegs(sc);
      } else {
        WgWait<0>();
        BarArrive(bar_empty + (it % kStages) * 8);
      }
      FenceRegs(acc);
      FenceRegs(pa);
    }
    // Row sums over the quad; WG1 normalises with them.
QuadRowSums(l_run, my_row, s_l, tq);
    NamedBarSync(kBarEnd, kThreads);
    if (!direct && tq == 0) WriteRowLse(p, w, my_row, m_run, l_run, max_splits);
  } else {
    // ---------------- WG1: O[:, 256:512] from the shared P; the TMA producer ----------------
    for (int it = 0; it < ntiles; ++it) {
      const int st = it % kStages;
      MbarWait(bar_full + st * 8, (it / kStages) & 1);
      NamedBarSync(kBarPFull, kThreads);  // P of tile `it` (and, for the last tile, its zeroed rows) ready
      const float a0 = s_alpha[my_row[0]], a1 = s_alpha[my_row[1]];
      ScaleAcc(acc, a0, a1);
      const uint32_t kt = sK + st * kTileBytes;
      FenceRegs(acc);
      WgFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) WgmmaPVss(acc, DescKMajor(sP, kk), DescV(kt, 4, kk), 1);
      WgCommit();
      WgWait<0>();
      FenceRegs(acc);
      if (it + 1 < ntiles) NamedBarArrive(kBarPEmpty, kThreads);
      BarArrive(bar_empty + st * 8);
      if (wtid == 0 && it + kStages < ntiles) {
        MbarWait(bar_empty + st * 8, (it / kStages) & 1);  // both warpgroups released the stage
        issue_tile(it + kStages);
      }
      __syncwarp();
    }
    NamedBarSync(kBarEnd, kThreads);
  }

  // Normalised output of this warpgroup's 256 columns (direct) or the split's partial.
  StoreRows<TOut>(p, w, acc, my_row, s_l, tq, wg * 256, direct, max_splits);
}

// ---------------------------------------------------------------------------------------------
// Variants 1 and 2 ("seesaw", MlaDecodeParams::sm90_variant; verified, not yet timed). The same
// CTA shape, plan and numerics as the kernel above; the work of a tile is split differently:
// tile t (64 keys) belongs to warpgroup t % 2 and always sits in ring stage t % 2. Its owner
// computes S_t = Q K_t^T, the online softmax of tile t from the running max m_{t-1} published by
// the other warpgroup (tile t - 1), and publishes m_t, the rescale alpha_t and P_t (bf16, in the
// tile's rope box: columns 512-575 are read only by S_t, which has completed) through shared
// memory; each warpgroup then does O[:, 256 w : 256 w + 256] = alpha_t O + P_t V_t for every
// tile in order (its own tiles with P from registers, the other's with P from shared memory).
// So the owner's softmax of tile t overlaps the other warpgroup's S_{t+1} on the tensor cores,
// and the S work is shared. Row sums: each warpgroup keeps l_w (its own tiles' sums, rescaled by
// every alpha); l = l_0 + l_1 at the end (fp32 order differs from the emulation only).
// Ring: 2 stages x 9 boxes, one "full" mbarrier per box (S starts on box 0 while the others land),
// one "empty" mbarrier per stage (256 arrivals: both warpgroups finished tile t's S / P V halves).
// Tile t + 2 is issued by a thread of tile t + 2's owner right after that warpgroup released tile
// t (the last release of the two, see below).
constexpr int kSsOffK = kTileBytes;                              // 2 stages, as above
constexpr int kSsOffM = kSsOffK + kStages * kTileBytes;          // [2][64] f32: m_t per stage
constexpr int kSsOffAlpha = kSsOffM + kStages * kBM * 4;         // [2][64] f32: alpha_t per stage
constexpr int kSsOffL = kSsOffAlpha + kStages * kBM * 4;         // [2][64] f32: l_w per warpgroup
constexpr int kSsOffBar = kSsOffL + 2 * kBM * 4;                 // full[2][9], empty[2]
constexpr int kSsSmemBytes = kSsOffBar + (kStages * kDB + kStages) * 8 + 1024;
static_assert(kSsSmemBytes <= 227 * 1024, "shared memory per SM");
// Named barriers: "tile published" by warpgroup 0 / 1 (owner arrives, the other syncs), a
// warpgroup-local barrier per warpgroup (zeroing of a partial tile), the end exchange.
constexpr int kSsBarPub0 = 1, kSsBarWg0 = 3, kSsBarEnd = 5;

// kEarlyRelease (variant 1 = true, variant 2 = false): when a warpgroup releases the other's
// tile t - 1 in its own iteration t: before issuing S_t (after draining the P V of tile t - 1)
// or after S_t completed.
template <typename TOut, bool kEarlyRelease>
__global__ void __launch_bounds__(kThreads, 1)
    MlaDecodeSm90SeesawKernel(const __grid_constant__ CUtensorMap kv_map, const MlaDecodeParams p, int nrb, int chunk,
                              int max_splits, int direct) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u);  // (stays a shared-space pointer)
  const uint32_t s_base = SmemAddr(smem);
  const uint32_t sQ = s_base + kOffQ, sK = s_base + kSsOffK;
  float* s_m = reinterpret_cast<float*>(smem + kSsOffM);
  float* s_alpha = reinterpret_cast<float*>(smem + kSsOffAlpha);
  float* s_l = reinterpret_cast<float*>(smem + kSsOffL);
  const uint32_t bar_full = s_base + kSsOffBar, bar_empty = bar_full + kStages * kDB * 8;

  const int tid = threadIdx.x, wtid = tid & 127;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform
  const int warp = wtid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const CtaWork w = GetCtaWork(p, nrb, chunk, max_splits);
  direct = direct || w.direct;  // a work list's one-split sequence writes its output itself
  const int s = w.s, H = w.H, q0 = w.q0;
  const int valid_rows = w.valid_rows, row0 = w.row0, kbeg = w.kbeg, kend = w.kend;
  if (row0 >= valid_rows) return;  // rows that do not exist (shorter query block): no outputs
  if (kbeg >= kend) {  // an empty split
    WriteEmptySplit<TOut, kThreads>(p, w, tid, max_splits, direct);
    return;
  }
  const int ntiles = (kend - kbeg + kBN - 1) / kBN;
  const int32_t* bt = p.block_table + static_cast<int64_t>(s) * p.max_blocks;
  const int bs = static_cast<int>(p.block_size);
  const KvL2Pol kv_l2 = KvL2Policy(p.sm90_kv_l2_hint);
  // Tile t -> stage t % 2, one mbarrier per box.
  auto issue_tile = [&](int t) {
    const int k0 = kbeg + t * kBN;
    const int row = bt[k0 / bs] * bs + k0 % bs;
    const int st = t & 1;
#pragma unroll
    for (int b = 0; b < kDB; ++b) {
      const uint32_t bar = bar_full + (st * kDB + b) * 8;
      BarExpectTx(bar, kBoxBytes);
      TmaLoadBox(sK + st * kTileBytes + b * kBoxBytes, &kv_map, b * 64, row, bar, kv_l2);
    }
  };
  if (tid == 0) {
    for (int i = 0; i < kStages * kDB; ++i) BarInit(bar_full + i * 8, 1);
    for (int st = 0; st < kStages; ++st) BarInit(bar_empty + st * 8, kThreads);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  __syncthreads();
  if (tid == 0) {  // the first two tiles, overlapping the Q load
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&kv_map)) : "memory");
    for (int t = 0; t < min(kStages, ntiles); ++t) issue_tile(t);
  }
  LoadQTile(p, smem, tid, row0, valid_rows, q0, H);  // Q tile -> bf16 swizzled boxes (as above)
  FenceProxyAsync();
  __syncthreads();

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  const int my_row[2] = {warp * 16 + g, warp * 16 + g + 8};
  int limit[2];
  float m_run[2], l_run[2];  // m_{t-1}: the running max before tile t; l: this warpgroup's share (its own tiles)
  InitRowState(w, my_row, limit, m_run, l_run);
  const float sl2 = p.softmax_scale * 1.4426950408889634f;
  const int other = wg ^ 1;
  const uint32_t my_stage = sK + wg * kTileBytes, other_stage = sK + other * kTileBytes;
  float sc[32];
  uint32_t pa[16];

  auto own_tile = [&](int t) {
    const uint32_t full_par = static_cast<uint32_t>((t >> 1) & 1);
    // ---------------- own tile: S_t, softmax, publish, O += alpha, P V (P from registers) ----------------
    if constexpr (kEarlyRelease) {
      // The P V of tile t - 1 (the other's) done before S_t is issued: this warpgroup has
      // finished tile t - 1 and releases it now, an S_t earlier than the late release, so the
      // other warpgroup re-arms that stage with tile t + 1 sooner (at the cost of the tensor
      // pipe draining between that P V and S_t). (A wgmma.wait_group 1 after S_t would do it
      // without the drain, but makes ptxas serialise the wgmmas of this loop.)
      WgWait<0>();
      FenceRegs(acc);
      if (t >= 1) BarArrive(bar_empty + other * 8);
    }
    const int nvalid = kend - (kbeg + t * kBN);
    if (nvalid < kBN) {  // the last, partial tile: every box landed, rows past the context zeroed
      for (int b = 0; b < kDB; ++b) MbarWait(bar_full + (wg * kDB + b) * 8, full_par);
      ZeroTileTail(smem + kSsOffK + wg * kTileBytes, nvalid, wtid);
      FenceProxyAsync();
      NamedBarSync(kSsBarWg0 + wg, 128);
    }
    {
      uint64_t dq = DescKMajor(sQ, 0), dk = DescKMajor(my_stage, 0);
      asm volatile("" : "+l"(dq), "+l"(dk));
      FenceRegs(sc);
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        if ((ks & 3) == 0) {  // box ks / 4 landed
          MbarWait(bar_full + (wg * kDB + (ks >> 2)) * 8, full_par);
          __syncwarp();
          WgFence();
        }
        const uint64_t off = static_cast<uint64_t>(((ks >> 2) * kBoxBytes + (ks & 3) * 32) >> 4);
        WgmmaQK(sc, dq + off, dk + off, ks > 0 ? 1 : 0);
      }
      WgCommit();
    }
    WgWait<0>();  // S_t (and, if still in flight, the P V of tile t - 1)
    FenceRegs(sc);
    FenceRegs(acc);
    if constexpr (!kEarlyRelease) {
      if (t >= 1) BarArrive(bar_empty + other * 8);  // this warpgroup is done with tile t - 1
    }
    const int kt0 = kbeg + t * kBN;
    float alpha[2];
    SoftmaxTile(sc, kt0, tq, limit, sl2, m_run, l_run, alpha);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pa[kk * 4 + 0] = PackBf16(sc[(2 * kk) * 4 + 0], sc[(2 * kk) * 4 + 1]);
      pa[kk * 4 + 1] = PackBf16(sc[(2 * kk) * 4 + 2], sc[(2 * kk) * 4 + 3]);
      pa[kk * 4 + 2] = PackBf16(sc[(2 * kk + 1) * 4 + 0], sc[(2 * kk + 1) * 4 + 1]);
      pa[kk * 4 + 3] = PackBf16(sc[(2 * kk + 1) * 4 + 2], sc[(2 * kk + 1) * 4 + 3]);
    }
    // Publish P_t (into the rope box of its stage), m_t and alpha_t.
    unsigned char* pbox = smem + kSsOffK + wg * kTileBytes + (kDB - 1) * kBoxBytes;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        *reinterpret_cast<uint32_t*>(pbox + SwzOff(my_row[hr], j * 8 + 2 * tq)) = pa[(j >> 1) * 4 + (j & 1) * 2 + hr];
    if (tq == 0) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        s_m[wg * kBM + my_row[hr]] = m_run[hr];
        s_alpha[wg * kBM + my_row[hr]] = alpha[hr];
      }
    }
    FenceProxyAsync();
    NamedBarArrive(kSsBarPub0 + wg, kThreads);
    ScaleAcc(acc, alpha[0], alpha[1]);
    uint64_t dv = DescV(my_stage, 4 * wg, 0);  // + kk * 2048 bytes per k16 step (start-address field)
    asm volatile("" : "+l"(dv));
    WgmmaPVFromRegs(acc, pa, dv);
    FenceRegs(pa);
  };
  auto other_tile = [&](int t) {
    const uint32_t full_par = static_cast<uint32_t>((t >> 1) & 1);
    // ---------------- the other's tile: O += alpha, P V (P from shared memory) ----------------
    // First the own P V of tile t - 1: then acc is free and this warpgroup is done with tile
    // t - 1, so tile t + 1 (mine) can go into its stage as soon as the other warpgroup released
    // it too (before it publishes tile t).
    WgWait<0>();
    FenceRegs(acc);
    if (t >= 1) {
      BarArrive(bar_empty + wg * 8);
      if (wtid == 0 && t + 1 < ntiles) {
        MbarWait(bar_empty + wg * 8, static_cast<uint32_t>(((t - 1) >> 1) & 1));  // the other released t - 1
        issue_tile(t + 1);
      }
      __syncwarp();
    }
    NamedBarSync(kSsBarPub0 + other, kThreads);  // P_t, m_t, alpha_t published (partial rows zeroed)
    float alpha[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      alpha[hr] = s_alpha[other * kBM + my_row[hr]];
      m_run[hr] = s_m[other * kBM + my_row[hr]];
      l_run[hr] *= alpha[hr];
    }
#pragma unroll
    for (int b = 0; b < 4; ++b) MbarWait(bar_full + (other * kDB + 4 * wg + b) * 8, full_par);  // my V boxes
    ScaleAcc(acc, alpha[0], alpha[1]);
    // Descriptors: P in the rope box (+ 32 bytes per k16 step), V (+ 2048 bytes per step).
    uint64_t dp = DescKMajor(other_stage + (kDB - 1) * kBoxBytes, 0), dv = DescV(other_stage, 4 * wg, 0);
    asm volatile("" : "+l"(dp), "+l"(dv));
    FenceRegs(acc);
    WgFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) WgmmaPVss(acc, dp + (kk * 32 >> 4), dv + (kk * 2048 >> 4), 1);
    WgCommit();
  };
  // Each warpgroup runs its own copy of the loop, with its role per tile fixed in the code (a
  // role branch inside one shared loop made ptxas serialise the wgmmas: C7514 / C7515).
  if (wg == 0) {
    for (int t = 0; t < ntiles; t += 2) {
      own_tile(t);
      if (t + 1 < ntiles) other_tile(t + 1);
    }
  } else {
    for (int t = 0; t < ntiles; t += 2) {
      other_tile(t);
      if (t + 1 < ntiles) own_tile(t + 1);
    }
  }
  WgWait<0>();
  FenceRegs(acc);
  // Row sums: l = l_0 + l_1 (quad-reduced); the final max m_run is the same in both warpgroups.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
    if (tq == 0) s_l[wg * kBM + my_row[hr]] = l_run[hr];
  }
  NamedBarSync(kSsBarEnd, kThreads);
  StoreRows<TOut, true>(p, w, acc, my_row, s_l, tq, wg * 256, direct, max_splits, wg,
                        [&](int hr) { return m_run[hr]; });
}

// ---------------------------------------------------------------------------------------------
// Variant 4 (MlaDecodeParams::sm90_variant = 4): three warpgroups. The same shared-memory
// tiles, plan and numerics as the kernel above (the same S, P, rescales and accumulation
// order), the work of a CTA split differently:
//   WG0 (threads 0-127): S = Q K^T (both operands in shared memory, as above), the online
//        softmax, and P (bf16) with the rescale factors written into the tile's own stage: P
//        into its rope box (columns 512-575, read only by S of that tile, which has completed),
//        the factors into the stage's slot. It holds no O. It issues S of tile t + 1 right
//        after writing P of tile t, and, when that tile has already landed, before it signals
//        the others, so that S(t + 1) runs ahead of P V(t) on the tensor cores and the softmax
//        of t + 1 overlaps P V(t); with P in the stage, it never waits for P V(t - 1) to
//        finish reading a shared P buffer.
//   WG1 / WG2: O[:, 0:256] / O[:, 256:512] += P V (both operands in shared memory). Thread 0
//        (WG0) issues the first two tiles, WG1's first thread every later one.
// Shared memory: Q and the two-stage ring as above, the factors per stage. Hand-offs: per
// stage, "full" (TMA bytes), "p_full" (WG0's 128 threads wrote P and the factors) and "empty"
// (WG1 and WG2 finished P V: 256 threads) mbarriers. 168 registers a thread (P V: 128 of O).
// Why (session 16 run 1): with no reloads the kernel above took 290 us at h128 b128 x 4K, 3,960
// cycles a tile for 2,176 of tensor work: its WG0 ran S, the softmax and half of P V in one
// chain. (A three-stage ring, with Q in WG0's registers to make room, did not fit the register
// file: WG0 needs ~190 registers and each P V warpgroup ~160; ptxas spilled and serialised the
// wgmmas.)
constexpr int kW3Threads = 384;
constexpr int kW3Stages = 2;
constexpr int kW3OffK = kTileBytes;                       // after the Q tile
constexpr int kW3OffAlpha = kW3OffK + kW3Stages * kTileBytes;  // [2][64] f32: the factors of each stage's tile
constexpr int kW3OffL = kW3OffAlpha + kW3Stages * kBM * 4;  // [64] f32
constexpr int kW3OffBar = kW3OffL + kBM * 4;  // full[2] (kBoxBar: [2][9]), p_full[2], empty[2]
constexpr int kW3SmemBytes = kW3OffBar + (kW3Stages * kDB + 2 * kW3Stages) * 8 + 1024;  // box barriers: kBoxBar
static_assert(kW3SmemBytes <= 227 * 1024, "shared memory per SM");
constexpr int kW3BarWg0 = 1, kW3BarEnd = 2;

// kFastSm (variants 8, 10): the shorter softmax (SoftmaxTileFast). kBoxBar (variant 10): one
// "full" mbarrier per 64-column box (9 a stage, as FlashMLA and the seesaw kernel): S of a tile
// starts on its first box while the rest land, and each P V warpgroup waits only for its 4 V
// boxes. Why (session 16 runs 8-10): WG0 spent about a fifth of its time waiting for whole tiles.
template <typename TOut, bool kFastSm = false, bool kBoxBar = false>
__global__ void __launch_bounds__(kW3Threads, 1)
    MlaDecodeSm90Wg3Kernel(const __grid_constant__ CUtensorMap kv_map, const MlaDecodeParams p, int nrb, int chunk,
                           int max_splits, int direct) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u);  // (stays a shared-space pointer)
  const uint32_t s_base = SmemAddr(smem);
  const uint32_t sQ = s_base + kOffQ, sK = s_base + kW3OffK;
  float* s_alpha = reinterpret_cast<float*>(smem + kW3OffAlpha);
  float* s_l = reinterpret_cast<float*>(smem + kW3OffL);
  constexpr int kFullBars = kBoxBar ? kW3Stages * kDB : kW3Stages;
  const uint32_t bar_full = s_base + kW3OffBar, bar_pfull = bar_full + kFullBars * 8,
                 bar_empty = bar_pfull + kW3Stages * 8;
  // The "full" mbarrier of box b of stage st (kBoxBar), or of the whole stage.
  auto full_bar = [&](int st, int b) { return bar_full + (kBoxBar ? st * kDB + b : st) * 8; };

  const int tid = threadIdx.x, wtid = tid & 127;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform
  const int warp = wtid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  long long* const cta_times = CtaTimesEntry(p, tid);  // the measurement hook (MlaDecodeParams::sm90_cta_times)
  const CtaWork w = GetCtaWork(p, nrb, chunk, max_splits);
  direct = direct || w.direct;  // a work list's one-split sequence writes its output itself
  const int s = w.s, H = w.H, q0 = w.q0;
  const int valid_rows = w.valid_rows, row0 = w.row0, kbeg = w.kbeg, kend = w.kend;
  if (row0 >= valid_rows) return;  // rows that do not exist (shorter query block): no outputs
  if (kbeg >= kend) {  // an empty split
    WriteEmptySplit<TOut, kW3Threads>(p, w, tid, max_splits, direct);
    return;
  }
  const int ntiles = (kend - kbeg + kBN - 1) / kBN;
  const KvL2Pol kv_l2 = KvL2Policy(p.sm90_kv_l2_hint);
  auto issue_tile = [&](int it) {  // tile `it` -> stage it % 2
    const int32_t* bt = p.block_table + static_cast<int64_t>(s) * p.max_blocks;
    const int bs = static_cast<int>(p.block_size);
    const int k0 = kbeg + it * kBN;
    const int row = bt[k0 / bs] * bs + k0 % bs;
    const int st = it % kW3Stages;
    if constexpr (kBoxBar) {
#pragma unroll
      for (int b = 0; b < kDB; ++b) {
        BarExpectTx(full_bar(st, b), kBoxBytes);
        TmaLoadBox(sK + st * kTileBytes + b * kBoxBytes, &kv_map, b * 64, row, full_bar(st, b), kv_l2);
      }
    } else {
      const uint32_t bar = bar_full + st * 8;
      BarExpectTx(bar, kTileBytes);
#pragma unroll
      for (int b = 0; b < kDB; ++b) TmaLoadBox(sK + st * kTileBytes + b * kBoxBytes, &kv_map, b * 64, row, bar, kv_l2);
    }
  };

  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < kFullBars; ++i) BarInit(bar_full + i * 8, 1);
#pragma unroll
    for (int st = 0; st < kW3Stages; ++st) {
      BarInit(bar_pfull + st * 8, 128);
      BarInit(bar_empty + st * 8, 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  __syncthreads();
  // Q tile -> bf16 swizzled boxes, one batch of loads; thread 0 issues the first stages under its
  // own Q loads.
  LoadQTile<kW3Threads, kBM * (kD / 4) / kW3Threads>(p, smem, tid, row0, valid_rows, q0, H, [&] {
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&kv_map)) : "memory");
      for (int it = 0; it < min(kW3Stages, ntiles); ++it) issue_tile(it);
    }
  });
  FenceProxyAsync();  // generic-proxy writes of Q -> visible to wgmma
  __syncthreads();
  if (cta_times != nullptr && tid == 0) cta_times[2] = clock64();
  const int my_row[2] = {warp * 16 + g, warp * 16 + g + 8};  // in the CTA's 64-row tile

  if (wg == 0) {
    // ---------------- WG0: S = Q K^T, softmax, P ----------------
    int limit[2];
    float m_run[2], l_run[2];
    InitRowState(w, my_row, limit, m_run, l_run);
    const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scores in base 2
    float sc[32];
    // Tile `it` landed (rows past the context zeroed in shared memory), then S(it) issued.
    auto issue_s = [&](int it) {
      const int st = it % kW3Stages;
      const uint32_t par = static_cast<uint32_t>((it / kW3Stages) & 1);
      const int nvalid = kend - (kbeg + it * kBN);
      if (!kBoxBar) MbarWait(bar_full + st * 8, par);
      if (nvalid < kBN) {  // the last, partial tile: every box landed, rows past the context zeroed
        if constexpr (kBoxBar)
          for (int b = 0; b < kDB; ++b) MbarWait(full_bar(st, b), par);
        ZeroTileTail(smem + kW3OffK + st * kTileBytes, nvalid, wtid);
        FenceProxyAsync();
        NamedBarSync(kW3BarWg0, 128);
      }
      // Base descriptors opaque, per-step offsets added (as the kernel above).
      uint64_t dq = DescKMajor(sQ, 0), dk = DescKMajor(sK + st * kTileBytes, 0);
      asm volatile("" : "+l"(dq), "+l"(dk));
      FenceRegs(sc);
      WgFence();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        if (kBoxBar && (ks & 3) == 0) {  // box ks / 4 landed (a partial tile: all waited above)
          MbarWait(full_bar(st, ks >> 2), par);
          __syncwarp();
          WgFence();
        }
        const uint64_t off = static_cast<uint64_t>(((ks >> 2) * kBoxBytes + (ks & 3) * 32) >> 4);
        WgmmaQK(sc, dq + off, dk + off, ks > 0 ? 1 : 0);
      }
      WgCommit();
    };
    // Whether tile `it` has landed (every box), without waiting.
    auto tile_landed = [&](int it) {
      const int st = it % kW3Stages;
      const uint32_t par = static_cast<uint32_t>((it / kW3Stages) & 1);
      bool ok = true;
      if constexpr (kBoxBar) {
#pragma unroll
        for (int b = 0; b < kDB; ++b) ok = ok && BarTestWait(full_bar(st, b), par);
      } else {
        ok = BarTestWait(bar_full + st * 8, par);
      }
      return ok;
    };
    issue_s(0);
    for (int it = 0; it < ntiles; ++it) {
      const int st = it % kW3Stages;
      WgWait<0>();
      FenceRegs(sc);
      // Online softmax of tile `it` (as the kernel above).
      const int kt0 = kbeg + it * kBN;
      float alpha[2];
      if constexpr (kFastSm) {
        SoftmaxTileFast(sc, kt0, tq, limit, sl2, m_run, l_run, alpha);
      } else {
        SoftmaxTile(sc, kt0, tq, limit, sl2, m_run, l_run, alpha);
      }
      // P (bf16) into the tile's rope box, the factors into the stage's slot.
      unsigned char* pbox = smem + kW3OffK + st * kTileBytes + 8 * kBoxBytes;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
          *reinterpret_cast<uint32_t*>(pbox + SwzOff(my_row[hr], j * 8 + 2 * tq)) =
              PackBf16(sc[j * 4 + 2 * hr], sc[j * 4 + 2 * hr + 1]);
      if (tq == 0) {
        s_alpha[st * kBM + my_row[0]] = alpha[0];
        s_alpha[st * kBM + my_row[1]] = alpha[1];
      }
      FenceProxyAsync();
      // S(it + 1) queued ahead of P V(it) when its tile has landed; otherwise P V(it) first, so
      // that it does not wait for that load. Only the arrive moves: the wgmmas have one call
      // site, so every warp of the warpgroup executes the same instructions (.aligned) even
      // when its warps see the tile land at different moments.
      const bool has_next = it + 1 < ntiles;
      const bool next_ready = has_next && __shfl_sync(0xffffffffu, tile_landed(it + 1) ? 1 : 0, 0) != 0;
      if (!next_ready) BarArrive(bar_pfull + st * 8);
      if (has_next) issue_s(it + 1);
      if (next_ready) BarArrive(bar_pfull + st * 8);
    }
    WgWait<0>();  // nothing in flight (the last tile issues no S); keeps ptxas from injecting one
    FenceRegs(sc);
    // Row sums over the quad; WG1 / WG2 normalise with them.
QuadRowSums(l_run, my_row, s_l, tq);
    NamedBarSync(kW3BarEnd, kW3Threads);
    if (!direct && tq == 0) WriteRowLse(p, w, my_row, m_run, l_run, max_splits);
    return;
  }
  // ---------------- WG1 / WG2: O[:, 256 (wg - 1) ..] += P V; WG1's first thread the producer ----------------
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  const int half = wg - 1;
  for (int it = 0; it < ntiles; ++it) {
    const int st = it % kW3Stages;
    const uint32_t par = static_cast<uint32_t>((it / kW3Stages) & 1);
    if constexpr (kBoxBar) {  // this warpgroup's V boxes (box 8 now holds P, covered by p_full)
#pragma unroll
      for (int b = 0; b < 4; ++b) MbarWait(full_bar(st, 4 * half + b), par);
    } else {
      MbarWait(bar_full + st * 8, par);
    }
    MbarWait(bar_pfull + st * 8, par);  // P and the factors of tile `it` (and its zeroed rows) ready
    const float a0 = s_alpha[st * kBM + my_row[0]], a1 = s_alpha[st * kBM + my_row[1]];
    ScaleAcc(acc, a0, a1);
    const uint32_t kt = sK + st * kTileBytes;
    FenceRegs(acc);
    WgFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) WgmmaPVss(acc, DescKMajor(kt + 8 * kBoxBytes, kk), DescV(kt, 4 * half, kk), 1);
    WgCommit();
    WgWait<0>();
    FenceRegs(acc);
    BarArrive(bar_empty + st * 8);
    if (half == 0 && wtid == 0 && it + kW3Stages < ntiles) {
      MbarWait(bar_empty + st * 8, par);  // both P V warpgroups released the stage (WG0's use ended before p_full)
      issue_tile(it + kW3Stages);
    }
    __syncwarp();
  }
  NamedBarSync(kW3BarEnd, kW3Threads);
  StoreRows<TOut>(p, w, acc, my_row, s_l, tq, half * 256, direct, max_splits);
  if (tid == 128) CtaTimesExit(cta_times, ntiles);
}

// out[t, h, :] = sum_s exp(lse_s - lse) o_s over the non-empty splits (lse = -inf: skipped):
// MergeSplits (mla_decode_merge.cuh), 8 splits' loads in flight (was 4: a batch-1 V3 combine over
// 32 hinted splits took 8 rounds, 8.3 us under ncu); the sums run in split order either way. Up
// to kCombineSmemSplits splits (session 36), its two-step form with the same bits: the LSEs in one
// round into shared-memory weights, then the partials 16 at a time (3 x n / 8 dependent L2 round
// trips become 1 + n / 16: 64 splits at batch 1 x 32K).
// kGroups > 1 (MlaDecodeParams::sm90_combine_groups, session 37; written in session 36 at
// f17a1a00): kGroups x 128 threads a (token, head); thread (g, c) holds columns 4c..4c+3, group g
// merges the contiguous share [g n / kGroups, (g + 1) n / kGroups) of the splits (16 partials in
// flight each) and group 0 adds the groups' sums in group order: kGroups x the loads in flight
// (128 heads x batch 1 x 32K, 64 splits: 8.2 us under ncu with one group, session 36 run 7). Not
// MergeSplits' summation order (each group sums in split order; fp32 rounding differs). Past
// kCombineSmemSplits splits: group 0 alone, MergeSplits.
constexpr int kCombineSmemSplits = 1024;
template <typename TOut, int kGroups>
__global__ void __launch_bounds__(kGroups * (kV / 4)) MlaDecodeSm90Combine(const MlaDecodeParams p, int max_splits) {
  constexpr int kThr = kGroups * (kV / 4);
  __shared__ float s_w[kCombineSmemSplits];
  __shared__ float4 s_acc[kGroups > 1 ? kGroups - 1 : 1][kV / 4];
  __shared__ float s_wsum[kGroups > 1 ? kGroups - 1 : 1][kV / 4];
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int t = blockIdx.x, h = blockIdx.y;
  const int g = kGroups > 1 ? static_cast<int>(threadIdx.x) / (kV / 4) : 0;
  const int c = kGroups > 1 ? static_cast<int>(threadIdx.x) % (kV / 4) : static_cast<int>(threadIdx.x);
  const int64_t base = (static_cast<int64_t>(t) * p.heads + h) * max_splits;
  const float* lse = p.workspace + p.num_tokens * p.heads * max_splits * kV + base;
  const int d = c * 4;
  int splits = max_splits;
  if (p.sm90_work != nullptr) {  // a work list: the token's sequence's own split count
    int lo = 0, hi = static_cast<int>(p.num_seqs) - 1;  // the last s with query_start[s] <= t
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.query_start[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    splits = min(p.sm90_splits[lo], max_splits);  // the launcher checks the list; never past the stride
    if (splits == 1) return;  // its CTAs wrote the output directly (CtaWork::direct); block-uniform
  }
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float wsum = 0.f;
  if (splits <= kCombineSmemSplits) {  // block-uniform
    mla::SplitWeightsToSmem(lse, splits, s_w, kThr);
    const int s0 = g * splits / kGroups, s1 = (g + 1) * splits / kGroups;
    if (s1 > s0) mla::MergeSplitsSmemWeights(p.workspace, s_w + s0, base + s0, s1 - s0, kV, d, &acc, &wsum);
  } else if (g == 0) {
    mla::MergeSplits(p.workspace, lse, base, splits, kV, d, &acc, &wsum);
  }
  if constexpr (kGroups > 1) {
    if (g > 0) {
      s_acc[g - 1][c] = acc;
      s_wsum[g - 1][c] = wsum;
    }
    __syncthreads();
    if (g > 0) return;
#pragma unroll
    for (int k = 0; k < kGroups - 1; ++k) {  // group order
      const float4 a = s_acc[k][c];
      acc.x += a.x; acc.y += a.y; acc.z += a.z; acc.w += a.w;
      wsum += s_wsum[k][c];
    }
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(t) * p.o_tok_stride + h * p.o_head_stride + d;
  out[0] = dev::FromF<TOut>(acc.x * inv);
  out[1] = dev::FromF<TOut>(acc.y * inv);
  out[2] = dev::FromF<TOut>(acc.z * inv);
  out[3] = dev::FromF<TOut>(acc.w * inv);
}

using Sm90Plan = MlaDecodeSm90Plan;

// PlanMlaDecodeSm90 (host_plans.h) on these params' hints and the device's SM count.
Sm90Plan MakePlan(const MlaDecodeParams& p) {
  const int64_t max_q = p.max_q_len > 0 ? p.max_q_len : p.num_tokens - p.num_seqs + 1;
  return PlanMlaDecodeSm90(max_q, p.heads, p.num_seqs, p.max_context, p.total_context, p.kv_chunk,
                           CurrentDeviceProps().sms, p.capacity_hints);
}

// The cache as a 2-D tensor [rows, 576] bf16 for TMA: boxes of 64 rows x 64 columns (128 bytes,
// the swizzle width), 128-byte swizzle. Rows: cache_rows, or unbounded (2^31) if not given.
CUtensorMap MakeKvMap(const MlaDecodeParams& p) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    DS_CHECK(q == cudaDriverEntryPointSuccess && fn) << "cuTensorMapEncodeTiled unavailable";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kD),
                              static_cast<cuuint64_t>(p.cache_rows > 0 ? p.cache_rows : int64_t{1} << 31)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kD) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(kBN)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(p.cache), dims,
                            strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DS_CHECK(r == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed: " << static_cast<int>(r);
  return map;
}

template <typename TOut>
void Launch(const MlaDecodeParams& p, const Sm90Plan& pl) {
  // Per device (device_props.h): a process-wide once-flag left GPUs other than the first at 48 KiB.
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaDecodeSm90Kernel<TOut>), static_cast<int>(kSmemBytes));
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaDecodeSm90SeesawKernel<TOut, true>),
                       static_cast<int>(kSsSmemBytes));
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaDecodeSm90SeesawKernel<TOut, false>),
                       static_cast<int>(kSsSmemBytes));
  const CUtensorMap map = MakeKvMap(p);
  // uv: every split writes its partial. A work list: one-split sequences write directly, the
  // combine merges the others' own counts (none: no combine).
  const bool direct = pl.max_splits == 1 && p.uv_w == nullptr;
  const int64_t ctas = pl.nrb * (p.sm90_work != nullptr ? p.sm90_work_items : p.num_seqs * pl.max_splits);
  DS_CHECK(ctas < (int64_t{1} << 31)) << "MlaDecodeAttentionSm90: grid too large";
  if (p.sm90_variant >= 12 && p.sm90_variant != 14) {  // variant 10 with a three-stage ring (mla_decode_sm90_ring3.cu)
    LaunchMlaDecodeSm90Ring3(map, p, static_cast<int>(pl.nrb), static_cast<int>(pl.chunk), static_cast<int>(pl.max_splits),
                             direct ? 1 : 0, static_cast<unsigned>(ctas));
  } else if (p.sm90_variant == 11) {  // the tile-pair schedule (mla_decode_sm90_pair.cu)
    LaunchMlaDecodeSm90Pair(map, p, static_cast<int>(pl.nrb), static_cast<int>(pl.chunk), static_cast<int>(pl.max_splits),
                            direct ? 1 : 0, static_cast<unsigned>(ctas));
  } else if (p.sm90_variant == 1 || p.sm90_variant == 2) {
    auto kernel = p.sm90_variant == 1 ? MlaDecodeSm90SeesawKernel<TOut, true> : MlaDecodeSm90SeesawKernel<TOut, false>;
    LaunchKernel(kernel, static_cast<unsigned>(ctas), kThreads, kSsSmemBytes, p.stream, p.pdl,
        map, p, static_cast<int>(pl.nrb), static_cast<int>(pl.chunk), static_cast<int>(pl.max_splits), direct ? 1 : 0);
    DS_CUDA_CHECK_LAUNCH("MlaDecodeSm90SeesawKernel");
  } else if (p.sm90_variant == 4 || p.sm90_variant == 8 || p.sm90_variant == 10) {
    // three warpgroups (8: the shorter softmax; 10: and per-box barriers)
    const auto kernel = p.sm90_variant == 10  ? MlaDecodeSm90Wg3Kernel<TOut, true, true>
                        : p.sm90_variant == 8 ? MlaDecodeSm90Wg3Kernel<TOut, true, false>
                                              : MlaDecodeSm90Wg3Kernel<TOut, false, false>;
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(kW3SmemBytes));
    LaunchKernel(kernel, static_cast<unsigned>(ctas), kW3Threads, kW3SmemBytes, p.stream, p.pdl,
        map, p, static_cast<int>(pl.nrb), static_cast<int>(pl.chunk), static_cast<int>(pl.max_splits), direct ? 1 : 0);
    DS_CUDA_CHECK_LAUNCH("MlaDecodeSm90Wg3Kernel");
  } else if (p.sm90_variant == 9) {  // kernel 0 with the shorter softmax
    const auto kernel = MlaDecodeSm90Kernel<TOut, true>;
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(kSmemBytes));
    LaunchKernel(kernel, static_cast<unsigned>(ctas), kThreads, kSmemBytes, p.stream, p.pdl,
        map, p, static_cast<int>(pl.nrb), static_cast<int>(pl.chunk), static_cast<int>(pl.max_splits), direct ? 1 : 0);
    DS_CUDA_CHECK_LAUNCH("MlaDecodeSm90Kernel (shorter softmax)");
  } else {
    LaunchKernel(MlaDecodeSm90Kernel<TOut>, static_cast<unsigned>(ctas), kThreads, kSmemBytes, p.stream, p.pdl,
        map, p, static_cast<int>(pl.nrb), static_cast<int>(pl.chunk), static_cast<int>(pl.max_splits), direct ? 1 : 0);
    DS_CUDA_CHECK_LAUNCH("MlaDecodeSm90Kernel");
  }
  if (direct) return;
  if (p.uv_w != nullptr) {  // the W_UV epilogue in place of the combine
    MlaDecodeCombineUv(p, static_cast<int>(pl.max_splits));
    return;
  }
  dim3 cgrid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.heads));
  if (MlaDecodeSm90CombineGroups(p, pl.max_splits) == 4)
    LaunchKernel(MlaDecodeSm90Combine<TOut, 4>, cgrid, 4 * (kV / 4), 0, p.stream, p.pdl, p, static_cast<int>(pl.max_splits));
  else
    LaunchKernel(MlaDecodeSm90Combine<TOut, 1>, cgrid, kV / 4, 0, p.stream, p.pdl, p, static_cast<int>(pl.max_splits));
  DS_CUDA_CHECK_LAUNCH("MlaDecodeSm90Combine");
}

}  // namespace

bool MlaDecodeSm90Supported(const MlaDecodeParams& p) {
  return p.kv_lora == kV && p.kv_lora + p.rope_dim == kD && p.block_size > 0 && p.block_size % kBN == 0 &&
         CurrentDeviceProps().sm90;
}

bool MlaDecodeSm90Selected(const MlaDecodeParams& p) {
  if (!p.sm90 || !MlaDecodeSm90Supported(p)) return false;
  const int64_t max_q = p.max_q_len > 0 ? p.max_q_len : p.num_tokens - p.num_seqs + 1;
  return max_q * p.heads >= (p.sm90_min_rows > 0 ? std::min<int64_t>(p.sm90_min_rows, kBM) : kBM);
}

// Four groups where the combine is one wave of few blocks over many splits (128 heads x batch 1 x
// 32K: 64 splits, 128 blocks; session 37 runs 1-2: 38.2-39.0 -> 36.2-36.6 us) and one group
// elsewhere (the mixed anchor, 8,192 blocks: 724 -> 757 us with four). Three 512-thread blocks an
// SM: the four-group kernel's 40 registers a thread (65,536 / (512 x 40) = 3.2).
int MlaDecodeSm90CombineGroups(const MlaDecodeParams& p, int64_t max_splits) {
  if (p.sm90_combine_groups == 1 || p.sm90_combine_groups == 4) return p.sm90_combine_groups;
  return max_splits >= 16 && p.num_tokens * p.heads <= int64_t{3} * CurrentDeviceProps().sms ? 4 : 1;
}

int64_t MlaDecodeSm90Chunk(const MlaDecodeParams& p, int* tile) {
  if (tile) *tile = kBN;
  return MakePlan(p).chunk;
}

void MlaDecodeAttentionSm90(const MlaDecodeParams& p) {
  DS_CHECK(MlaDecodeSm90Supported(p))
      << "MlaDecodeAttentionSm90: needs an sm_90 device, kv_lora 512, rope 64, block_size % 64 == 0";
  DS_CHECK(p.kv_chunk > 0) << "MlaDecodeAttentionSm90: kv_chunk";
  DS_CHECK(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && p.q_tok_stride % 4 == 0 && p.q_head_stride % 4 == 0)
      << "MlaDecodeAttentionSm90: q must be 16-byte aligned with strides % 4 == 0";
  DS_CHECK(p.q_bf16 == nullptr ||
           (reinterpret_cast<uintptr_t>(p.q_bf16) % 16 == 0 && p.q_tok_stride % 8 == 0 && p.q_head_stride % 8 == 0))
      << "MlaDecodeAttentionSm90: q_bf16 must be 16-byte aligned with strides % 8 == 0";
  DS_CHECK(reinterpret_cast<uintptr_t>(p.cache) % 16 == 0) << "MlaDecodeAttentionSm90: cache alignment";
  DS_CHECK(p.o_head_stride % 4 == 0 && p.o_tok_stride % 4 == 0 && reinterpret_cast<uintptr_t>(p.out) % 8 == 0)
      << "MlaDecodeAttentionSm90: output strides % 4 and an 8-byte aligned output (column pairs stored as one)";
  DS_CHECK(p.cache_rows == 0 || p.cache_rows < (int64_t{1} << 31)) << "MlaDecodeAttentionSm90: cache too large";
  DS_CHECK(p.sm90_variant >= 0 && p.sm90_variant <= 16 && p.sm90_variant != 3 && p.sm90_variant != 5 &&
           p.sm90_variant != 6 && p.sm90_variant != 7 && p.sm90_variant != 14)
      << "MlaDecodeAttentionSm90: sm90_variant " << p.sm90_variant
      << " (0-2, 4, 8-13, 15, 16; 3 and 5-7 were measured slower and removed in session 16; 14 in session 38)";
  // The shorter softmax takes the row max on raw scores and masks through fma(-inf, scale, .):
  // both need a positive scale.
  DS_CHECK(p.sm90_variant < 8 || p.softmax_scale > 0.f)
      << "MlaDecodeAttentionSm90: sm90_variant " << p.sm90_variant << " needs softmax_scale > 0";
  DS_CHECK(p.sm90_combine_groups == 0 || p.sm90_combine_groups == 1 || p.sm90_combine_groups == 4)
      << "MlaDecodeAttentionSm90: sm90_combine_groups " << p.sm90_combine_groups << " (0 by shape, 1, 4)";
  DS_CHECK(p.sm90_kv_l2_hint >= 0 && p.sm90_kv_l2_hint <= 3)
      << "MlaDecodeAttentionSm90: sm90_kv_l2_hint " << p.sm90_kv_l2_hint << " (0-3)";
  if (p.num_tokens == 0 || p.num_seqs == 0) return;
  Sm90Plan pl = MakePlan(p);
  DS_CHECK(p.sm90_work != nullptr || p.sm90_splits == nullptr)
      << "MlaDecodeAttentionSm90: sm90_splits without sm90_work (a work list needs both)";
  if (p.sm90_work != nullptr) {  // a balanced work list (MlaDecodeParams::sm90_work)
    DS_CHECK(p.sm90_work_items >= 1 && p.sm90_splits != nullptr && p.sm90_work_max_splits >= 1 && p.uv_w == nullptr)
        << "MlaDecodeAttentionSm90: a work list needs items, per-sequence split counts, a split stride, and no uv_w";
    DS_CHECK(p.sm90_work_max_splits <= std::max<int64_t>(1, (p.max_context + p.kv_chunk - 1) / p.kv_chunk))
        << "MlaDecodeAttentionSm90: work-list split stride " << p.sm90_work_max_splits
        << " exceeds the workspace's splits for kv_chunk " << p.kv_chunk;
    DS_CHECK(reinterpret_cast<uintptr_t>(p.sm90_work) % 16 == 0) << "MlaDecodeAttentionSm90: work list alignment";
    pl.max_splits = p.sm90_work_max_splits;
  }
  DS_CHECK(pl.max_splits < 65536 && pl.chunk < (int64_t{1} << 30)) << "MlaDecodeAttentionSm90: plan";
  // Split partials: float2 stores and float4 loads of the workspace; the combine grid is
  // (tokens, heads).
  DS_CHECK((pl.max_splits == 1 && p.uv_w == nullptr) || (p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0))
      << "MlaDecodeAttentionSm90: " << pl.max_splits << " splits need a 16-byte aligned workspace";
  DS_CHECK(p.heads < 65536 && p.num_tokens < (int64_t{1} << 31)) << "MlaDecodeAttentionSm90: combine grid";
  if (p.out_type == DTypeOut::kF32) Launch<float>(p, pl);
  else Launch<__nv_bfloat16>(p, pl);
}

}  // namespace ds::cuda
