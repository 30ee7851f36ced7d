// Variant 11 of the sm_90a absorbed-MLA decode (MlaDecodeParams::sm90_variant = 11): the tile
// pair schedule. Same CTA shape, split plan, operands and outputs as MlaDecodeSm90Kernel
// (mla_decode_sm90.cu): one CTA = one sequence x 64 query rows x one KV split, 256 threads (two
// warpgroups), Q [64 x 576] bf16 in shared memory, a 2-stage ring of 64-key tiles loaded by TMA
// as nine 64-column boxes with one "full" mbarrier each.
//
// Why (session 16's ablation at h128 b128 x 4K): variant 0's ring stage is re-armed only when
// both warpgroups are done with its tile, about one softmax before the tile after next is
// needed, so most of each 72 KB load's latency is exposed, and its warpgroup 0 runs S, the
// softmax and half of P V in one chain. FlashMLA's sm_90 dense decode kernel (deepseek-ai/FlashMLA,
// csrc/sm90/decode/dense, read for its schedule; this is our own code on our own helpers) takes
// 244.8 us there against our 323-360 with three ideas, all used here:
//  - Tiles go in pairs (2i, 2i + 1). Warpgroup 0 computes S and the softmax of the even tile,
//    warpgroup 1 of the odd one; warpgroup w accumulates O[:, 256 w : 256 w + 256] over both
//    tiles (its own tile's P from registers, the other's from shared memory), so each softmax runs
//    while the other warpgroup's wgmmas keep the tensor cores busy.
//  - One running max per pair: warpgroup 1's softmax starts from warpgroup 0's new max m0 and
//    gives m1; the even tile's P is handed over already rescaled to m1 (bf16(p0 x 2^(m0 - m1))),
//    and O is rescaled once per warpgroup and pair.
//  - No cross-warpgroup "empty" barrier: boxes 0-3 (V[:, 0:256]) are re-armed by warpgroup 0 and
//    boxes 4-7 (V[:, 256:512]) by warpgroup 1, each as soon as its own wgmma on them completes (the
//    last readers); the rope box, read only by S, by warpgroup 1 at the start of its pair
//    iteration (S of the tile's previous use is done by then). The warpgroup computing S waits
//    for the boxes in a fixed order close to the order they are issued: 0-3, 8, 4-7 for warpgroup
//    0's tiles, 8, 4-7, 0-3 for warpgroup 1's. The block-table entries of the tiles a warpgroup
//    re-arms are read a pair ahead.
// Q's rope box (columns 512-575) is held in registers as wgmma A fragments (16 a thread, RS
// wgmma), so its 8 KB of shared memory holds the odd tile's P; the even tile's P has its own box.
// Shared memory: Q 72 KB (box 8 = P1), 2 x 72 KB ring, P0 8 KB, m / scale0 / scale1 / row sums.
//
// Per pair (tiles t, t + 1; S(t) is in warpgroup 0's registers, S(t + 1) in warpgroup 1's):
//   WG0: softmax(t) from m (shared) -> m0, scale0 = 2^(m - m0) | arrive Scale0 | O0 *= scale0 |
//        O0 += P0 V_L(t) (RS) | sync Scale1 | P0' = bf16(p0 x scale1) -> P0 box, arrive P0 |
//        wait(RS) -> re-arm boxes 0-3 of t's stage with t + 2 | O0 *= scale1 | sync P1 |
//        O0 += P1 V_L(t + 1) (SS) | S(t + 2) boxes 0-3, 8 | wait(SS) -> re-arm boxes 0-3 of
//        t + 1's stage with t + 3 | S(t + 2) boxes 4-7 | wait.
//   WG1: sync Scale0 | re-arm the rope boxes of t + 2 and t + 3 | softmax(t + 1) from m0 -> m1,
//        scale1 = 2^(m0 - m1) | arrive Scale1 | O1 *= scale0 scale1 | P1 -> Q box 8 |
//        O1 += P1 V_R(t + 1) (RS) | sync P0 | O1 += P0' V_R(t) (SS) | arrive P1 | wait(RS) ->
//        re-arm boxes 4-7 of t + 1's stage with t + 3 | wait(SS) -> re-arm boxes 4-7 of t's stage
//        with t + 2 | S(t + 3) boxes 8, 4-7, 0-3 | wait.
// An odd last tile: warpgroup 1 publishes scale1 = 1 and only adds P0' V_R(t). The last, partial
// tile has its rows past the context zeroed in all nine boxes by the warpgroup that computes its
// S, after every box landed and before any wgmma reads it (unused cache rows may hold NaN).
// The P V warpgroups never wait on the boxes' mbarriers themselves: the S warpgroup waited on all
// nine, and the named-barrier hand-offs order their reads after it.
//
// Numerics: bf16 Q and P, fp32 softmax and accumulation, 64-key tiles, base-2 exponent (the
// shorter softmax of variants 8-10: max on raw scores, softmax_scale > 0), but the max is updated
// per pair and the even tile's P is rounded after its rescale to m1, so the results differ from
// variant 0's by bf16 roundings of P (the op tests hold it to the emulation's 1e-3).
#include <cuda.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mla_decode_sm90_common.cuh"

namespace ds::cuda {
namespace {

constexpr int kPrOffK = kTileBytes;                              // 2 stages after Q
constexpr int kPrOffP0 = kPrOffK + kStages * kTileBytes;         // [64 x 64] bf16, a swizzled box
constexpr int kPrOffM = kPrOffP0 + kBoxBytes;                    // [64] f32: the running max
constexpr int kPrOffScale0 = kPrOffM + kBM * 4;                  // [64] f32
constexpr int kPrOffScale1 = kPrOffScale0 + kBM * 4;             // [64] f32
constexpr int kPrOffL = kPrOffScale1 + kBM * 4;                  // [2][64] f32: row sums per warpgroup
constexpr int kPrOffBar = kPrOffL + 2 * kBM * 4;                 // full[2][9]
constexpr int kPrSmemBytes = kPrOffBar + kStages * kDB * 8 + 1024;
static_assert(kPrSmemBytes <= 227 * 1024, "shared memory per SM");
constexpr int kPrOffP1 = kOffQ + (kDB - 1) * kBoxBytes;          // Q's rope box, once in registers
// Named barriers (0 is __syncthreads): the pair's hand-offs (256 threads: one warpgroup arrives,
// the other syncs), a warpgroup-local one per warpgroup (zeroing a partial tile), the end.
constexpr int kPrBarScale0 = 1, kPrBarScale1 = 2, kPrBarP0 = 3, kPrBarP1 = 4, kPrBarWg0 = 5, kPrBarEnd = 7;

// Per-row softmax state and the probability fragments of one 64-key tile (rows g, g + 8 of the
// thread's warp; sc as the wgmma m64n64 accumulator: element 4 j + c is key 8 j + 2 tq + (c & 1)
// of row half c >> 1). On return sc holds p = 2^(s sl2 - m_new) (0 past the row's limit), pa the
// same as bf16 RS fragments, m_new the new running max and scale = 2^(m_prev - m_new) (1 where
// the max did not move, so rows that saw no key keep O = 0 without 0 x inf), sum the row sums
// of p over this thread's keys. As SoftmaxTileFast (variants 8-10): the row max on raw scores
// (softmax_scale > 0), the exponent as one FMA, ex2.approx.ftz.
__device__ __forceinline__ void PairSoftmax(float (&sc)[32], uint32_t (&pa)[16], int kt0, int tq, const int (&limit)[2],
                                            float sl2, const float (&m_prev)[2], float (&m_new)[2], float (&scale)[2],
                                            float (&sum)[2]) {
  const bool whole = __all_sync(0xffffffffu, kt0 + kBN <= limit[0] && kt0 + kBN <= limit[1]);
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int hr = c >> 1;
      float v = sc[j * 4 + c];
      if (!whole && kt0 + j * 8 + 2 * tq + (c & 1) >= limit[hr]) v = -INFINITY;
      sc[j * 4 + c] = v;
      mx[hr] = fmaxf(mx[hr], v);
    }
  float nmuse[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
    m_new[hr] = fmaxf(m_prev[hr], mx[hr] * sl2);  // (the max on raw scores: sl2 > 0; -inf * sl2 = -inf)
    const float muse = m_new[hr] == -INFINITY ? 0.f : m_new[hr];
    scale[hr] = m_new[hr] == m_prev[hr] ? 1.f : Ex2Ftz(m_prev[hr] - muse);
    nmuse[hr] = -muse;
    sum[hr] = 0.f;
  }
#pragma unroll
  for (int j = 0; j < 32; ++j) {  // the exponent as one FMA (masked: fma(-inf, sl2, .) = -inf -> 0)
    const float pv = Ex2Ftz(fmaf(sc[j], sl2, nmuse[(j >> 1) & 1]));
    sc[j] = pv;
    sum[(j >> 1) & 1] += pv;
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    pa[kk * 4 + 0] = PackBf16(sc[(2 * kk) * 4 + 0], sc[(2 * kk) * 4 + 1]);
    pa[kk * 4 + 1] = PackBf16(sc[(2 * kk) * 4 + 2], sc[(2 * kk) * 4 + 3]);
    pa[kk * 4 + 2] = PackBf16(sc[(2 * kk + 1) * 4 + 0], sc[(2 * kk + 1) * 4 + 1]);
    pa[kk * 4 + 3] = PackBf16(sc[(2 * kk + 1) * 4 + 2], sc[(2 * kk + 1) * 4 + 3]);
  }
}

// RS fragments pa (the m16n8k16 A layout per warp) into a [64 x 64] bf16 box with the 128-byte
// swizzle, the K-major A operand another warpgroup's SS wgmma reads.
__device__ __forceinline__ void StorePBox(unsigned char* box, const uint32_t (&pa)[16], const int (&my_row)[2], int tq) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
      *reinterpret_cast<uint32_t*>(box + SwzOff(my_row[hr], j * 8 + 2 * tq)) = pa[(j >> 1) * 4 + (j & 1) * 2 + hr];
}

// kTl (MlaDecodeParams::sm90_timeline set): CTA 0's first thread of each warpgroup records
// (event, clock64) pairs at the points of its pair loop named by the kTl* events below, up to
// kTlMax a warpgroup, into sm90_timeline[warpgroup][2 * kTlMax] (a measurement hook: bench kernels
// with DS_BENCH_MLA_TIMELINE=1 prints the mean gap before each event).
constexpr int kTlMax = 1024;
template <typename TOut, bool kTl = false>
__global__ void __launch_bounds__(kThreads, 1)
    MlaDecodeSm90PairKernel(const __grid_constant__ CUtensorMap kv_map, const MlaDecodeParams p, int nrb, int chunk,
                            int max_splits, int direct) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u);  // (stays a shared-space pointer)
  const uint32_t s_base = SmemAddr(smem);
  const uint32_t sQ = s_base + kOffQ, sK = s_base + kPrOffK;
  float* s_m = reinterpret_cast<float*>(smem + kPrOffM);
  float* s_scale0 = reinterpret_cast<float*>(smem + kPrOffScale0);
  float* s_scale1 = reinterpret_cast<float*>(smem + kPrOffScale1);
  float* s_l = reinterpret_cast<float*>(smem + kPrOffL);
  const uint32_t bar_full = s_base + kPrOffBar;  // [stage][box]

  const int tid = threadIdx.x, wtid = tid & 127;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform
  const int warp = wtid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const CtaWork w = GetCtaWork(p, nrb, chunk, max_splits);
  if (!CtaHasWork<TOut, kThreads>(p, w, tid, max_splits, direct)) return;
  const int ntiles = (w.kend - w.kbeg + kBN - 1) / kBN;
  int tl_n = 0;
  const auto stamp = [&](int ev) {
    if constexpr (kTl) {
      if (blockIdx.x == 0 && wtid == 0 && tl_n < kTlMax) {
        long long* row = p.sm90_timeline + static_cast<int64_t>(wg) * 2 * kTlMax + 2 * tl_n++;
        row[0] = ev;
        row[1] = static_cast<long long>(clock64());
      }
    }
  };
  const int32_t* bt = p.block_table + static_cast<int64_t>(w.s) * p.max_blocks;
  const int bs = static_cast<int>(p.block_size);
  // The first cache row of tile t (a global load of its block-table entry).
  const auto row_of = [&](int t) {
    const int k0 = w.kbeg + t * kBN;
    return bt[k0 / bs] * bs + k0 % bs;
  };
  const KvL2Pol kv_l2 = KvL2Policy(p.sm90_kv_l2_hint);
  // Boxes [b0, b1) of tile t (first cache row `row`) into its stage (t & 1), each completing its
  // own mbarrier.
  const auto load_boxes = [&](int t, int row, int b0, int b1) {
    const int st = t & 1;
    for (int b = b0; b < b1; ++b) {
      const uint32_t bar = bar_full + (st * kDB + b) * 8;
      BarExpectTx(bar, kBoxBytes);
      TmaLoadBox(sK + st * kTileBytes + b * kBoxBytes, &kv_map, b * 64, row, bar, kv_l2);
    }
  };
  if (tid == 0) {
    for (int i = 0; i < kStages * kDB; ++i) BarInit(bar_full + i * 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  __syncthreads();
  if (tid == 0) {  // tiles 0 and 1 (in the order their S reads them), overlapping the Q load
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&kv_map)) : "memory");
    const int row0 = row_of(0);
    load_boxes(0, row0, 0, kDB);
    if (ntiles > 1) {
      const int row1 = row_of(1);
      load_boxes(1, row1, 4, kDB);
      load_boxes(1, row1, 0, 4);
    }
  }
  LoadQTile(p, smem, tid, w.row0, w.valid_rows, w.q0, w.H);
  FenceProxyAsync();
  __syncthreads();
  const int my_row[2] = {warp * 16 + g, warp * 16 + g + 8};
  // Q's rope box as RS A fragments (k16 step kk: rows g / g + 8, columns 16 kk + 2 tq (+ 8)).
  uint32_t rq8[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int f = 0; f < 4; ++f)
      rq8[kk][f] = *reinterpret_cast<const uint32_t*>(smem + kPrOffP1 + SwzOff(my_row[f & 1], 16 * kk + 2 * tq + 8 * (f >> 1)));
  if (tid < kBM) s_m[tid] = -INFINITY;
  __syncthreads();  // every rq8 read before the box holds P1; s_m initialised

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  int limit[2];
  float m_unused[2], l_run[2];
  InitRowState(w, my_row, limit, m_unused, l_run);
  const float sl2 = p.softmax_scale * 1.4426950408889634f;
  float sc[32];
  uint32_t pa[16];

  // S of tile t into sc: the boxes in `order` (box 8 with Q's rope part from registers), each
  // waited for (parity of the stage's use t >> 1) just before its wgmmas. The last, partial tile:
  // every box landed, rows past the context zeroed (this warpgroup), then the wgmmas.
  const auto issue_s = [&](int t, const int (&order)[kDB], int n_first, bool second) {
    const int st = t & 1;
    const uint32_t par = static_cast<uint32_t>((t >> 1) & 1);
    const uint32_t stage = sK + st * kTileBytes;
    uint64_t dq = DescKMajor(sQ, 0), dk = DescKMajor(stage, 0);
    asm volatile("" : "+l"(dq), "+l"(dk));
    if (!second) {
      const int nvalid = w.kend - (w.kbeg + t * kBN);
      if (nvalid < kBN) {
        for (int b = 0; b < kDB; ++b) MbarWait(bar_full + (st * kDB + b) * 8, par);
        ZeroTileTail(smem + kPrOffK + st * kTileBytes, nvalid, wtid);
        FenceProxyAsync();
        NamedBarSync(kPrBarWg0 + wg, 128);
      }
    }
    if (!second) FenceRegs(sc);  // (not while the first boxes' wgmmas are in flight)
    const int i0 = second ? n_first : 0, i1 = second ? kDB : n_first;
#pragma unroll
    for (int i = 0; i < kDB; ++i) {
      if (i < i0 || i >= i1) continue;
      const int b = order[i];
      MbarWait(bar_full + (st * kDB + b) * 8, par);
      __syncwarp();
      WgFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t off = static_cast<uint64_t>((b * kBoxBytes + kk * 32) >> 4);
        const int first = i == 0 && kk == 0 ? 0 : 1;
        if (b == kDB - 1) sm90::WgmmaBf16Rs(sc, rq8[kk], dk + off, first);
        else WgmmaQK(sc, dq + off, dk + off, first);
      }
    }
    WgCommit();
  };
  // The boxes in the order they are issued: the rope box (read only by S) is re-armed first, at
  // the start of warpgroup 1's pair iteration, then each warpgroup's V half after its P V.
  constexpr int kOrder0[kDB] = {0, 1, 2, 3, 8, 4, 5, 6, 7};  // warpgroup 0's tiles
  constexpr int kOrder1[kDB] = {8, 4, 5, 6, 7, 0, 1, 2, 3};  // warpgroup 1's tiles

  if (wg == 0) {
    issue_s(0, kOrder0, kDB, false);
    // The block-table entries of the tiles this warpgroup re-arms, read a pair ahead of their use
    // (session 19 run 12: a read on the spot put an L2 round trip in front of each re-arm).
    int nrow2 = wtid == 0 && 2 < ntiles ? row_of(2) : 0, nrow3 = wtid == 0 && 3 < ntiles ? row_of(3) : 0;
    WgWait<0>();
    FenceRegs(sc);
    for (int t = 0; t < ntiles; t += 2) {
      const bool has1 = t + 1 < ntiles, has2 = t + 2 < ntiles, has3 = t + 3 < ntiles;
      const int row2 = nrow2, row3 = nrow3;
      if (wtid == 0) {
        nrow2 = t + 4 < ntiles ? row_of(t + 4) : 0;
        nrow3 = t + 5 < ntiles ? row_of(t + 5) : 0;
      }
      stamp(0);
      float m_prev[2], m0[2], scale0[2], sum[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) m_prev[hr] = s_m[my_row[hr]];
      PairSoftmax(sc, pa, w.kbeg + t * kBN, tq, limit, sl2, m_prev, m0, scale0, sum);
      __syncwarp();  // the quad's reads of s_m before its update
      if (tq == 0) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          s_m[my_row[hr]] = m0[hr];
          s_scale0[my_row[hr]] = scale0[hr];
        }
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) l_run[hr] = l_run[hr] * scale0[hr] + sum[hr];
      NamedBarArrive(kPrBarScale0, kThreads);
      stamp(1);
      ScaleAcc(acc, scale0[0], scale0[1]);
      {  // O0 += P0 V_L(t), P from registers
        uint64_t dv = DescV(sK + (t & 1) * kTileBytes, 0, 0);
        asm volatile("" : "+l"(dv));
        WgmmaPVFromRegs(acc, pa, dv);
      }
      stamp(2);
      NamedBarSync(kPrBarScale1, kThreads);
      stamp(3);
      float scale1[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) scale1[hr] = s_scale1[my_row[hr]];
      {  // P0' = bf16(p0 x scale1) for warpgroup 1
        uint32_t pb[16];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          pb[kk * 4 + 0] = PackBf16(sc[(2 * kk) * 4 + 0] * scale1[0], sc[(2 * kk) * 4 + 1] * scale1[0]);
          pb[kk * 4 + 1] = PackBf16(sc[(2 * kk) * 4 + 2] * scale1[1], sc[(2 * kk) * 4 + 3] * scale1[1]);
          pb[kk * 4 + 2] = PackBf16(sc[(2 * kk + 1) * 4 + 0] * scale1[0], sc[(2 * kk + 1) * 4 + 1] * scale1[0]);
          pb[kk * 4 + 3] = PackBf16(sc[(2 * kk + 1) * 4 + 2] * scale1[1], sc[(2 * kk + 1) * 4 + 3] * scale1[1]);
        }
        StorePBox(smem + kPrOffP0, pb, my_row, tq);
      }
      FenceProxyAsync();
      NamedBarArrive(kPrBarP0, kThreads);
      stamp(4);
      WgWait<0>();  // O0 += P0 V_L(t) done (its wait after the hand-off, so warpgroup 1 gets P0' sooner)
      FenceRegs(acc);
      FenceRegs(pa);
      stamp(5);
      if (has2 && wtid == 0) load_boxes(t + 2, row2, 0, 4);  // V_L(t) and S(t) done: boxes 0-3 free
      __syncwarp();  // (the warp converged before the next .aligned instruction)
      ScaleAcc(acc, scale1[0], scale1[1]);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) l_run[hr] *= scale1[hr];
      if (has1) {  // O0 += P1 V_L(t + 1), P1 from shared memory (written by warpgroup 1)
        NamedBarSync(kPrBarP1, kThreads);
        stamp(6);
        uint64_t dp = DescKMajor(s_base + kPrOffP1, 0), dv = DescV(sK + ((t + 1) & 1) * kTileBytes, 0, 0);
        asm volatile("" : "+l"(dp), "+l"(dv));
        FenceRegs(acc);
        WgFence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) WgmmaPVss(acc, dp + (kk * 32 >> 4), dv + (kk * 2048 >> 4), 1);
        WgCommit();
      }
      stamp(7);
      if (has2) issue_s(t + 2, kOrder0, 5, false);  // boxes 0-3 and 8 (issued first)
      stamp(8);
      if (has1 && has3) {
        WgWait<1>();  // (has3 implies has2: S(t + 2)'s first boxes are the newer group)
        if (wtid == 0) load_boxes(t + 3, row3, 0, 4);  // V_L(t + 1) done (its S long done): boxes 0-3 free
        __syncwarp();  // (the warp converged before the next .aligned instruction)
      }
      stamp(9);
      if (has2) issue_s(t + 2, kOrder0, 5, true);   // boxes 4-7
      stamp(10);
      WgWait<0>();
      FenceRegs(acc);
      FenceRegs(sc);
      stamp(11);
    }
  } else {
    if (ntiles > 1) {
      issue_s(1, kOrder1, kDB, false);
      WgWait<0>();
      FenceRegs(sc);
    }
    int nrow2 = wtid == 0 && 2 < ntiles ? row_of(2) : 0, nrow3 = wtid == 0 && 3 < ntiles ? row_of(3) : 0;
    for (int t = 0; t < ntiles; t += 2) {
      const bool has1 = t + 1 < ntiles, has2 = t + 2 < ntiles, has3 = t + 3 < ntiles;
      const int row2 = nrow2, row3 = nrow3;
      if (wtid == 0) {
        nrow2 = t + 4 < ntiles ? row_of(t + 4) : 0;
        nrow3 = t + 5 < ntiles ? row_of(t + 5) : 0;
      }
      stamp(20);
      NamedBarSync(kPrBarScale0, kThreads);
      stamp(21);
      // The rope boxes: tile t + 2's (S(t) done: warpgroup 0's softmax of t came first) and t + 3's
      // (S(t + 1), this warpgroup's, done).
      if (wtid == 0) {
        if (has2) load_boxes(t + 2, row2, kDB - 1, kDB);
        if (has3) load_boxes(t + 3, row3, kDB - 1, kDB);
      }
      __syncwarp();
      float m0[2], scale0[2], scale1[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        m0[hr] = s_m[my_row[hr]];
        scale0[hr] = s_scale0[my_row[hr]];
      }
      if (has1) {
        float m1[2], sum[2];
        PairSoftmax(sc, pa, w.kbeg + (t + 1) * kBN, tq, limit, sl2, m0, m1, scale1, sum);
        __syncwarp();
        if (tq == 0) {
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            s_m[my_row[hr]] = m1[hr];
            s_scale1[my_row[hr]] = scale1[hr];
          }
        }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) l_run[hr] = l_run[hr] * (scale0[hr] * scale1[hr]) + sum[hr];
      } else {
        __syncwarp();
        if (tq == 0) {
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) s_scale1[my_row[hr]] = 1.f;
        }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          scale1[hr] = 1.f;
          l_run[hr] *= scale0[hr];
        }
      }
      NamedBarArrive(kPrBarScale1, kThreads);
      stamp(22);
      ScaleAcc(acc, scale0[0] * scale1[0], scale0[1] * scale1[1]);
      if (has1) {
        StorePBox(smem + kPrOffP1, pa, my_row, tq);  // for warpgroup 0 (P1 V_L)
        FenceProxyAsync();
        uint64_t dv = DescV(sK + ((t + 1) & 1) * kTileBytes, 4, 0);  // O1 += P1 V_R(t + 1), P from registers
        asm volatile("" : "+l"(dv));
        WgmmaPVFromRegs(acc, pa, dv);
      }
      stamp(23);
      NamedBarSync(kPrBarP0, kThreads);
      stamp(24);
      {  // O1 += P0' V_R(t), P0' from shared memory (written by warpgroup 0)
        uint64_t dp = DescKMajor(s_base + kPrOffP0, 0), dv = DescV(sK + (t & 1) * kTileBytes, 4, 0);
        asm volatile("" : "+l"(dp), "+l"(dv));
        FenceRegs(acc);
        WgFence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) WgmmaPVss(acc, dp + (kk * 32 >> 4), dv + (kk * 2048 >> 4), 1);
        WgCommit();
      }
      if (has1) NamedBarArrive(kPrBarP1, kThreads);  // P1 is in its box (and fenced)
      stamp(25);
      if (has1) {
        WgWait<1>();
        FenceRegs(pa);
        if (has3 && wtid == 0) load_boxes(t + 3, row3, 4, kDB - 1);  // V_R(t + 1) done: boxes 4-7 free
        __syncwarp();  // (the warp converged before the next .aligned instruction)
      }
      stamp(26);
      WgWait<0>();
      FenceRegs(acc);
      stamp(27);
      if (has2 && wtid == 0) load_boxes(t + 2, row2, 4, kDB - 1);  // V_R(t) done: boxes 4-7 free
      __syncwarp();  // (the warp converged before the next .aligned instruction)
      if (has3) {
        issue_s(t + 3, kOrder1, kDB, false);
        stamp(28);
        WgWait<0>();
        FenceRegs(sc);
      }
      stamp(29);
    }
  }

  // Row sums: l = l_0 + l_1 (quad-reduced); the final max is s_m (both warpgroups' O and l are
  // relative to it).
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
    if (tq == 0) s_l[wg * kBM + my_row[hr]] = l_run[hr];
  }
  NamedBarSync(kPrBarEnd, kThreads);
  StoreRows<TOut, true>(p, w, acc, my_row, s_l, tq, wg * 256, direct, max_splits, wg,
                        [s_m, &my_row](int hr) { return s_m[my_row[hr]]; });
}

}  // namespace

void LaunchMlaDecodeSm90Pair(const CUtensorMap& map, const MlaDecodeParams& p, int nrb, int chunk, int max_splits,
                             int direct, unsigned ctas) {
  if (p.sm90_timeline != nullptr) {  // the measurement hook (bf16 or fp32 output alike)
    const auto k = p.out_type == DTypeOut::kF32 ? MlaDecodeSm90PairKernel<float, true>
                                                : MlaDecodeSm90PairKernel<__nv_bfloat16, true>;
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(k), static_cast<int>(kPrSmemBytes));
    LaunchKernel(k, ctas, kThreads, kPrSmemBytes, p.stream, p.pdl, map, p, nrb, chunk, max_splits, direct);
    DS_CUDA_CHECK_LAUNCH("MlaDecodeSm90PairKernel (timeline)");
    return;
  }
  if (p.out_type == DTypeOut::kF32) {
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaDecodeSm90PairKernel<float>), static_cast<int>(kPrSmemBytes));
    LaunchKernel(MlaDecodeSm90PairKernel<float>, ctas, kThreads, kPrSmemBytes, p.stream, p.pdl, map, p, nrb, chunk,
                 max_splits, direct);
  } else {
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaDecodeSm90PairKernel<__nv_bfloat16>),
                         static_cast<int>(kPrSmemBytes));
    LaunchKernel(MlaDecodeSm90PairKernel<__nv_bfloat16>, ctas, kThreads, kPrSmemBytes, p.stream, p.pdl, map, p, nrb,
                 chunk, max_splits, direct);
  }
  DS_CUDA_CHECK_LAUNCH("MlaDecodeSm90PairKernel");
}

}  // namespace ds::cuda
