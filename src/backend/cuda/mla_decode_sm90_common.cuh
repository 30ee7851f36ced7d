// Device helpers shared by the sm_90a absorbed-MLA decode kernels (mla_decode_sm90.cu: variants
// 0-2, 4, 8-10; mla_decode_sm90_pair.cu: variant 11; mla_decode_sm90_ring3.cu: 12, 13, 15): tile sizes and the shared-memory map of
// variant 0, swizzle / descriptor arithmetic, TMA box loads, the wgmma forms, the online
// softmax, the Q tile load and the per-CTA bookkeeping. See mla_decode_sm90.cu's header.
// Each file that includes it gets its own copy (anonymous namespace).
#pragma once

#include <cuda.h>

#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/mla_decode.h"
#include "backend/cuda/sm90_ptx.cuh"
#include "backend/cuda/wgmma_ops.cuh"

namespace ds::cuda {
namespace {

using namespace sm90;  // PTX wrappers (sm90_ptx.cuh)

constexpr int kD = 576, kV = 512;      // key (latent + rope) and value (latent) dims
constexpr int kBM = 64;                // query rows per CTA (one wgmma M tile)
constexpr int kBN = 64;                // keys per tile (one page of 64 tokens)
constexpr int kDB = kD / 64;           // 64-column boxes per row (9): one 128-byte swizzle atom wide
constexpr int kBoxBytes = 64 * 128;    // one [64 rows x 64 cols] bf16 box
constexpr int kTileBytes = kDB * kBoxBytes;  // 73728: a K tile or the Q tile
constexpr int kStages = 2;
constexpr int kThreads = 256;
// Shared-memory map (offsets from a 1024-byte aligned base: the 128-byte swizzle repeats every
// 1024 bytes, and TMA / wgmma compute it from the address bits).
constexpr int kOffQ = 0;
constexpr int kOffK = kTileBytes;
constexpr int kOffP = kOffK + kStages * kTileBytes;      // [64 x 64] bf16, swizzled like a box
constexpr int kOffAlpha = kOffP + kBoxBytes;             // [64] f32: per-row rescale of the tile
constexpr int kOffL = kOffAlpha + kBM * 4;               // [64] f32: final row sums
constexpr int kOffBar = kOffL + kBM * 4;                 // full[kStages], empty[kStages] (8 B each)
constexpr int kSmemUsed = kOffBar + 2 * kStages * 8;
constexpr int kSmemBytes = kSmemUsed + 1024;             // + alignment slack
static_assert(kSmemBytes <= 227 * 1024, "shared memory per SM");
// Named barriers (0 is __syncthreads).
constexpr int kBarPFull = 1, kBarPEmpty = 2, kBarWg0 = 3, kBarEnd = 4;
// The split plan (host_plans.h, CPU-tested) assumes these tile sizes.
static_assert(kBM == kMlaDecodeSm90RowsPerCta && kBN == kMlaDecodeSm90KeysPerTile, "plan vs kernel tiles");

// Byte offset of element (r, c) in a [rows x 64] bf16 box with the 128-byte swizzle (16-byte
// chunk index XOR row % 8): the layout TMA's CU_TENSOR_MAP_SWIZZLE_128B writes and wgmma's
// 128B-swizzle descriptors read.
__device__ __forceinline__ uint32_t SwzOff(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2);
}
// K-major operand (rows x K, K contiguous) stored as 64-column boxes: k16 step ks starts at box
// ks / 4, 32 bytes per step inside the 128-byte row; 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t DescKMajor(uint32_t base, int ks) {
  return Desc(base + (ks >> 2) * kBoxBytes + (ks & 3) * 32, 16, 1024);
}
// MN-major B operand (V: rows = keys = K, columns = value dims = N, contiguous): N atoms of 64
// columns are the boxes (8192 bytes apart, LBO), 8-key groups 1024 bytes apart (SBO); k16 step
// kk starts 16 rows = 2048 bytes further.
__device__ __forceinline__ uint64_t DescV(uint32_t tile, int box0, int kk) {
  return Desc(tile + box0 * kBoxBytes + kk * 2048, kBoxBytes, 1024);
}
using sm90::FenceRegs;  // the fp32 form; this file adds the uint32_t one
template <int N>
__device__ __forceinline__ void FenceRegs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
// Spins until the phase of the given parity has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  while (!BarTryWait(bar, parity)) {
  }
}
// One [64 rows x 64 cols] box of the cache (tensor map: dim 0 = the 576 columns, dim 1 = the
// cache rows) into shared memory, completing `bytes` on the mbarrier.
// With a policy (KvL2Policy, hint != 0), the load carries it as its L2 cache hint.
struct KvL2Pol {
  uint64_t pol = 0;
  bool on = false;
};
// MlaDecodeParams::sm90_kv_l2_hint -> an L2 cache policy (fraction 1) for the cache loads.
__device__ __forceinline__ KvL2Pol KvL2Policy(int hint) {
  KvL2Pol k;
  k.on = hint >= 1 && hint <= 3;
  if (hint == 1) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(k.pol));
  if (hint == 2) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(k.pol));
  if (hint == 3) asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(k.pol));
  return k;
}
__device__ __forceinline__ void TmaLoadBox(uint32_t dst, const CUtensorMap* map, int col, int row, uint32_t bar,
                                           KvL2Pol l2 = {}) {
  if (l2.on) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], "
        "[%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar), "l"(l2.pol)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar)
        : "memory");
  }
}

// d[64 x 64] (+)= A[64 x 16] (smem, K-major) * B[16 x 64] (smem, K-major); scale_d 0 overwrites d
// (wgmma_ops.cuh).
__device__ __forceinline__ void WgmmaQK(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  sm90::WgmmaBf16(d, da, db, scale_d);
}
// d[64 x 256] (+)= A[64 x 16] (smem, K-major) * B[16 x 256] (smem, MN-major); scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaPVss(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " DS_WGMMA_D128_REGS ", %128, %129, p, 1, 1, 0, 1;\n}\n"
               : DS_WGMMA_D128_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}
// d[64 x 256] += A[64 x 16] (registers, the m16n8k16 A layout per warp) * B[16 x 256] (smem, MN-major).
__device__ __forceinline__ void WgmmaPVrs(float (&d)[128], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " DS_WGMMA_D128_REGS ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
               : DS_WGMMA_D128_OUT
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

// O (acc) += P (pa: this warpgroup's 64 x 64 probabilities as bf16 A fragments in registers) *
// V: the four k16 steps from V's descriptor dv (+ 2048 bytes a step), fenced and committed as one
// wgmma group (the caller waits for it).
__device__ __forceinline__ void WgmmaPVFromRegs(float (&acc)[128], uint32_t (&pa)[16], uint64_t dv) {
  FenceRegs(acc);
  FenceRegs(pa);
  WgFence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    WgmmaPVrs(acc, pa[kk * 4 + 0], pa[kk * 4 + 1], pa[kk * 4 + 2], pa[kk * 4 + 3], dv + (kk * 2048 >> 4));
  WgCommit();
}

// The online softmax of one 64-key tile (the default kernels' form; the emulation
// emulate_tc_rounding with sm90 follows it): sc holds this thread's 32 raw scores of rows g /
// g + 8 (element 4 j + c: key kt0 + 8 j + 2 tq + (c & 1) of row half c >> 1, the rest of each row
// in its quad), keys at or past a row's limit masked. On return sc holds the probabilities
// exp2(score * sl2 - m) (sl2 = softmax_scale * log2 e: base 2), m_run / l_run the running max
// and row sum (this thread's part; quad-reduced by the caller at the end), alpha the factor the
// accumulated O of each row is rescaled by (FlashAttention-2's online softmax, as FlashMLA).
__device__ __forceinline__ void SoftmaxTile(float (&sc)[32], int kt0, int tq, const int (&limit)[2], float sl2,
                                            float (&m_run)[2], float (&l_run)[2], float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int hr = c >> 1;
      const int key = kt0 + j * 8 + 2 * tq + (c & 1);
      const float v = key < limit[hr] ? sc[j * 4 + c] * sl2 : -INFINITY;
      sc[j * 4 + c] = v;
      mx[hr] = fmaxf(mx[hr], v);
    }
  float muse[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
    const float m_new = fmaxf(m_run[hr], mx[hr]);
    muse[hr] = m_new == -INFINITY ? 0.f : m_new;
    alpha[hr] = exp2f(m_run[hr] - muse[hr]);
    m_run[hr] = m_new;
  }
  float lsum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float pv = exp2f(sc[j * 4 + c] - muse[c >> 1]);
      sc[j * 4 + c] = pv;
      lsum[c >> 1] += pv;
    }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) l_run[hr] = l_run[hr] * alpha[hr] + lsum[hr];
}
// kFastSm (variants 8 / 9): the online softmax of one 64-key tile (sc: this thread's 32 raw
// scores, rows g / g + 8, see the kernels) in fewer instructions than the default form, for the
// warpgroup whose softmax is on the critical path (session 16 run 10, Nsight Compute: WG0 of the
// three-warpgroup kernel issues ~60% of its cycles, one warp per scheduler):
//  - the key mask only when some key of the tile is past a row's limit (a warp-uniform test);
//  - the row max on the raw scores (softmax_scale > 0), the exponent as one FMA,
//    exp2(s * sl2 - m), and exp2 as ex2.approx.ftz.
// Not bit-equal to the default form (one rounding less in the exponent; a probability can round
// to the other bf16 neighbour): within the emulation's 1e-3 bound.
__device__ __forceinline__ float Ex2Ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// O (a warpgroup's 64 x 256 fp32 wgmma accumulator, this thread's 128) rescaled by the online
// softmax's factors of its rows g (s0) and g + 8 (s1).
__device__ __forceinline__ void ScaleAcc(float (&acc)[128], float s0, float s1) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    acc[j * 4 + 0] *= s0; acc[j * 4 + 1] *= s0;
    acc[j * 4 + 2] *= s1; acc[j * 4 + 3] *= s1;
  }
}
// The second half of SoftmaxTileFast (and of variant 15's SoftmaxTileTree): given mx, this thread's
// row maxima of the raw scores (before the quad reduction), the new running maxima, the factors
// alpha, the probabilities exp2(s * sl2 - m) into sc and the running row sums.
__device__ __forceinline__ void SoftmaxExpFromMax(float (&sc)[32], float (&mx)[2], float sl2, float (&m_run)[2],
                                                  float (&l_run)[2], float (&alpha)[2]) {
  float nmuse[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
    const float m_new = fmaxf(m_run[hr], mx[hr] * sl2);  // -inf * sl2 = -inf
    const float muse = m_new == -INFINITY ? 0.f : m_new;
    alpha[hr] = Ex2Ftz(m_run[hr] - muse);
    m_run[hr] = m_new;
    nmuse[hr] = -muse;
  }
  float lsum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float pv = Ex2Ftz(fmaf(sc[j * 4 + c], sl2, nmuse[c >> 1]));
      sc[j * 4 + c] = pv;
      lsum[c >> 1] += pv;
    }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) l_run[hr] = l_run[hr] * alpha[hr] + lsum[hr];
}
__device__ __forceinline__ void SoftmaxTileFast(float (&sc)[32], int kt0, int tq, const int (&limit)[2], float sl2,
                                                float (&m_run)[2], float (&l_run)[2], float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
  const bool whole = __all_sync(0xffffffffu, kt0 + kBN <= limit[0] && kt0 + kBN <= limit[1]);
  if (whole) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) mx[c >> 1] = fmaxf(mx[c >> 1], sc[j * 4 + c]);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int hr = c >> 1;
        const int key = kt0 + j * 8 + 2 * tq + (c & 1);
        const float v = key < limit[hr] ? sc[j * 4 + c] : -INFINITY;
        sc[j * 4 + c] = v;
        mx[hr] = fmaxf(mx[hr], v);
      }
  }
  SoftmaxExpFromMax(sc, mx, sl2, m_run, l_run, alpha);
}

// The CTA's Q tile (64 rows x 576, fp32 in q) -> bf16 in shared memory (at `smem`: the Q area,
// or a ring stage of the three-warpgroup kernel), swizzled boxes as the wgmma descriptors (and
// ldmatrix) read them; rows past the query block are zeros. Each of kNThreads threads converts
// kBM * 144 / kNThreads float4 (36 with 256 threads), kQBatch of them per round with all of that round's loads
// issued first: a one-load-at-a-time loop made this a chain of 36 dependent round trips per
// thread, ~25 us of a batch-1 decode CTA (ncu, V3 128 heads x 1K: 29 us per launch, session 6
// run 2). The same elements and roundings either way (bit-identical).
constexpr int kQBatch = 12;
// kBatch = kPer (session 37, the three-warpgroup kernel: variants 4, 8, 10): every load of the
// thread in one batch (one round trip
// instead of kPer / 12), and `mid` (the producer's first TMA loads, which wait for a block-table
// read) called between the loads and the conversions, so the producer thread's Q loads are in
// flight under its block-table read instead of after it. Session 37 run 3 (against run 2's form):
// variant 10 0.5-1.5% faster, the prologue (entry to Q in shared memory, 13-18 K cycles a CTA)
// ~1-4 K cycles shorter; the same form slowed variants 0 and 11 (256 threads, 36 loads a thread:
// batch 1 x 32K 41 -> 43 and 41 -> 48 us, the V3 decode step +1%), which keep batches of 12.
struct NoMid {
  __device__ void operator()() const {}
};
// MlaDecodeParams::q_bf16 (session 40): the Q tile from the caller's bf16 copy, 16-byte pieces (8
// columns, one swizzle chunk) straight into the swizzled boxes, every load of the thread in one batch
// (18 a thread with 256 threads, 12 with 384), `mid` between the loads and the stores as below.
// Half the bytes of the fp32 tile and no conversion; the same bf16 values as LoadQTile's rounding
// when q_bf16 = bf16_rn(q).
template <int kNThreads, typename Mid>
__device__ __forceinline__ void LoadQTileBf16(const MlaDecodeParams& p, unsigned char* smem, int tid, int row0,
                                              int valid_rows, int q0, int H, const Mid& mid) {
  constexpr int kChunks = kD / 8;  // 16-byte pieces per row
  constexpr int kPer = kBM * kChunks / kNThreads;
  static_assert(kBM * kChunks % kNThreads == 0, "Q tile split");
  uint4 v[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int idx = tid + j * kNThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const int row = row0 + r;
    v[j] = make_uint4(0, 0, 0, 0);
    if (row < valid_rows)
      v[j] = __ldg(reinterpret_cast<const uint4*>(p.q_bf16 + static_cast<int64_t>(q0 + row / H) * p.q_tok_stride +
                                                  static_cast<int64_t>(row % H) * p.q_head_stride + c * 8));
  }
  mid();
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int idx = tid + j * kNThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    *reinterpret_cast<uint4*>(smem + kOffQ + (c >> 3) * kBoxBytes + SwzOff(r, (c & 7) * 8)) = v[j];
  }
}
template <int kNThreads = kThreads, int kBatch = kQBatch, typename Mid = NoMid>
__device__ __forceinline__ void LoadQTile(const MlaDecodeParams& p, unsigned char* smem, int tid, int row0,
                                          int valid_rows, int q0, int H, const Mid& mid = Mid{}) {
  if (p.q_bf16 != nullptr) {  // (uniform: a kernel parameter)
    LoadQTileBf16<kNThreads>(p, smem, tid, row0, valid_rows, q0, H, mid);
    return;
  }
  constexpr int kVec = kD / 4;  // float4 per row
  constexpr int kPer = kBM * kVec / kNThreads;
  static_assert(kBM * kVec % kNThreads == 0 && kPer % kBatch == 0, "Q tile split");
#pragma unroll 1
  for (int b0 = 0; b0 < kPer; b0 += kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int idx = tid + (b0 + j) * kNThreads;
      const int r = idx / kVec, c = (idx % kVec) * 4;
      const int row = row0 + r;
      v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row < valid_rows)
        v[j] = __ldg(reinterpret_cast<const float4*>(p.q + static_cast<int64_t>(q0 + row / H) * p.q_tok_stride +
                                                     static_cast<int64_t>(row % H) * p.q_head_stride + c));
    }
    if (b0 == 0) mid();
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int idx = tid + (b0 + j) * kNThreads;
      const int r = idx / kVec, c = (idx % kVec) * 4;
      uint2 packed;
      packed.x = PackBf16(v[j].x, v[j].y);
      packed.y = PackBf16(v[j].z, v[j].w);
      *reinterpret_cast<uint2*>(smem + kOffQ + (c >> 6) * kBoxBytes + SwzOff(r, c & 63)) = packed;
    }
  }
}

// MlaDecodeParams::sm90_cta_times (the three-warpgroup kernels, a measurement hook): this CTA's 8
// slots, or nullptr; thread `tid` 0 records its SM, clock64 and globaltimer at entry.
// CtaTimesExit (the caller's thread 128 after its output stores) records clock64, globaltimer and
// the tile count. Slot 2 (clock64 once Q is in place) is the kernel's own, and so is slot 7 (the ring
// kernel, session 40: clock64 once the Q tile is in shared memory, before warpgroup 0 reads its
// fragments; left as the caller's fill value elsewhere).
__device__ __forceinline__ long long* CtaTimesEntry(const MlaDecodeParams& p, int tid) {
  long long* const t = p.sm90_cta_times == nullptr ? nullptr : p.sm90_cta_times + 8 * static_cast<int64_t>(blockIdx.x);
  if (t != nullptr && tid == 0) {
    unsigned smid;
    long long gt;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(gt));
    t[0] = smid;
    t[1] = clock64();
    t[4] = gt;
  }
  return t;
}
__device__ __forceinline__ void CtaTimesExit(long long* t, int ntiles) {
  if (t == nullptr) return;
  long long gt;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(gt));
  t[3] = clock64();
  t[5] = gt;
  t[6] = ntiles;
}

// The kernel. Grid: one CTA per (sequence, split, 64-row block), the row blocks of one
// (sequence, split) adjacent so they run together and share the tile reads in L2.
// A CTA's work (every kernel here; grid: one CTA per (sequence, split, 64-row block), the row
// blocks of one (sequence, split) adjacent): its sequence s, KV split and 64-row block rb, the
// sequence's query tokens [q0, q0 + q_len) and context, the rows that exist (valid_rows =
// q_len x heads, row = query token i * heads + head), the split's keys [kbeg, kend), and where
// the workspace's LSE block starts.
struct CtaWork {
  int rb, split, s, H, q0, q_len, ctx, valid_rows, row0, kbeg, kend;
  bool direct;  // a work list's sequence of one split: its CTAs write the output (the combine skips it)
  int64_t lse_base;
};
static_assert(sizeof(MlaDecodeSm90WorkItem) == 16, "MlaDecodeSm90WorkItem is read as an int4");
__device__ __forceinline__ CtaWork GetCtaWork(const MlaDecodeParams& p, int nrb, int chunk, int max_splits) {
  CtaWork w;
  w.rb = static_cast<int>(blockIdx.x % nrb);
  int4 item = make_int4(0, 0, 0, 0);  // MlaDecodeParams::sm90_work: (s, split, kbeg, kend)
  if (p.sm90_work != nullptr) {
    item = static_cast<const int4*>(p.sm90_work)[blockIdx.x / nrb];
    w.split = item.y;
    w.s = item.x;
    w.direct = p.sm90_splits[w.s] == 1;  // (the launcher rejects a work list with uv_w)
  } else {
    w.direct = false;
    w.split = static_cast<int>((blockIdx.x / nrb) % max_splits);
    w.s = static_cast<int>(blockIdx.x / (static_cast<unsigned>(nrb) * max_splits));
  }
  w.H = static_cast<int>(p.heads);
  w.q0 = p.query_start[w.s];
  w.q_len = p.query_start[w.s + 1] - w.q0;
  w.ctx = p.context_lens[w.s];
  w.valid_rows = w.q_len * w.H;
  w.row0 = w.rb * kBM;
  w.kbeg = p.sm90_work != nullptr ? item.z : w.split * chunk;
  w.kend = min(w.ctx, p.sm90_work != nullptr ? item.w : w.kbeg + chunk);
  w.lse_base = p.num_tokens * p.heads * max_splits * kV;
  return w;
}
// The per-row state of a thread's two rows my_row (in the CTA's 64-row tile) before the first
// tile: the key limit (causal inside the query block: query token i of q_len sees the context
// up to ctx - (q_len - 1 - i); -1 for rows that do not exist) and the online softmax's running
// max (-inf) and row sum (0).
__device__ __forceinline__ void InitRowState(const CtaWork& w, const int (&my_row)[2], int (&limit)[2],
                                             float (&m_run)[2], float (&l_run)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = w.row0 + my_row[hr];
    limit[hr] = row < w.valid_rows ? min(w.kend, w.ctx - (w.q_len - 1 - row / w.H)) : -1;
    m_run[hr] = -INFINITY;
    l_run[hr] = 0.f;
  }
}
// An empty split (kbeg >= kend): zeros (direct: no keys at all) or an LSE of -inf, which the
// combine skips. kNThreads threads.
template <typename TOut, int kNThreads>
__device__ __forceinline__ void WriteEmptySplit(const MlaDecodeParams& p, const CtaWork& w, int tid, int max_splits,
                                                int direct) {
  if (direct) {
    for (int idx = tid; idx < kBM * kV; idx += kNThreads) {
      const int row = w.row0 + idx / kV;
      if (row < w.valid_rows)
        static_cast<TOut*>(p.out)[static_cast<int64_t>(w.q0 + row / w.H) * p.o_tok_stride +
                                  static_cast<int64_t>(row % w.H) * p.o_head_stride + idx % kV] = dev::FromF<TOut>(0.f);
    }
  } else {
    for (int r = tid; r < kBM; r += kNThreads) {
      const int row = w.row0 + r;
      if (row < w.valid_rows)
        p.workspace[w.lse_base + (static_cast<int64_t>(w.q0 + row / w.H) * w.H + row % w.H) * max_splits + w.split] =
            -INFINITY;
    }
  }
}

// A decode kernel's start after GetCtaWork (the tile-pair and ring kernels; mla_decode_sm90.cu's
// kernels keep the same steps inline: folding them there changed their SASS): `direct` widened by a
// work list's one-split sequence, then the two early exits (rows that do not exist; an empty split,
// whose outputs are written here). False when the CTA has nothing more to do.
template <typename TOut, int kThreads>
__device__ __forceinline__ bool CtaHasWork(const MlaDecodeParams& p, const CtaWork& w, int tid, int max_splits,
                                           int& direct) {
  direct = direct || w.direct;  // a work list's one-split sequence writes its output itself
  if (w.row0 >= w.valid_rows) return false;  // rows that do not exist (shorter query block): no outputs
  if (w.kbeg >= w.kend) {  // an empty split
    WriteEmptySplit<TOut, kThreads>(p, w, tid, max_splits, direct);
    return false;
  }
  return true;
}
// Rows past the context of a freshly landed, partial tile (nvalid < 64 keys) zeroed in shared
// memory, all 9 boxes, by one warpgroup (wtid 0-127), before any wgmma reads the tile: unused
// cache rows may hold anything, NaN included (P = 0 there, but 0 * NaN = NaN).
__device__ __forceinline__ void ZeroTileTail(unsigned char* tile, int nvalid, int wtid) {
  const int nz = (kBN - nvalid) * 8;  // 16-byte pieces per box
  for (int idx = wtid; idx < kDB * nz; idx += 128) {
    const int b = idx / nz, e = idx % nz;
    *reinterpret_cast<uint4*>(tile + b * kBoxBytes + nvalid * 128 + e * 16) = make_uint4(0, 0, 0, 0);
  }
}
// The row sums of a thread's two rows reduced over its quad (the other 48 keys of each row) and
// published in s_l by the quad's first thread, for the warpgroups that normalise O.
__device__ __forceinline__ void QuadRowSums(float (&l_run)[2], const int (&my_row)[2], float* s_l, int tq) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
    if (tq == 0) s_l[my_row[hr]] = l_run[hr];
  }
}
// A split's LSE (natural log; -inf where the row saw no key) of a thread's existing rows, for the
// combine: ln(l) + m ln 2 (m and l in base 2).
__device__ __forceinline__ void WriteRowLse(const MlaDecodeParams& p, const CtaWork& w, const int (&my_row)[2],
                                            const float (&m_run)[2], const float (&l_run)[2], int max_splits) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = w.row0 + my_row[hr];
    if (row >= w.valid_rows) continue;
    const int64_t part = (static_cast<int64_t>(w.q0 + row / w.H) * w.H + row % w.H) * max_splits + w.split;
    p.workspace[w.lse_base + part] =
        l_run[hr] > 0.f ? (m_run[hr] + log2f(l_run[hr])) * 0.6931471805599453f : -INFINITY;
  }
}
// A warpgroup's 256 value columns from col0 of its rows my_row (O accumulator layout as in the
// kernels), normalised by the row sums s_l: the output (direct) or the split's partial.
// kTwoSums (the seesaw and pair kernels, whose warpgroups each hold a part of a row's sum): the
// sum is s_l[r] + s_l[kBM + r], and with splits warpgroup 0's quad leaders (wg: the caller's
// warpgroup) also write the row's LSE after its partial, ln(l) + m_of(hr) ln 2 (m in base 2).
template <typename TOut, bool kTwoSums = false, class MOf = int>
__device__ __forceinline__ void StoreRows(const MlaDecodeParams& p, const CtaWork& w, const float (&acc)[128],
                                          const int (&my_row)[2], const float* s_l, int tq, int col0, int direct,
                                          int max_splits, int wg = 0, MOf m_of = 0) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = w.row0 + my_row[hr];
    if (row >= w.valid_rows) continue;
    float l;
    if constexpr (kTwoSums) l = s_l[my_row[hr]] + s_l[kBM + my_row[hr]];
    else l = s_l[my_row[hr]];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int t = w.q0 + row / w.H, h = row % w.H;
    if (direct) {
      TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(t) * p.o_tok_stride +
                  static_cast<int64_t>(h) * p.o_head_stride + col0 + 2 * tq;
      // Columns 2 tq, 2 tq + 1 as one store (session 40; 2-byte stores left half of each sector
      // unused, session 16's ncu): the same roundings (RN per element).
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const float a = acc[j * 4 + 2 * hr] * inv, c = acc[j * 4 + 2 * hr + 1] * inv;
        if constexpr (std::is_same_v<TOut, float>) *reinterpret_cast<float2*>(out + j * 8) = make_float2(a, c);
        else *reinterpret_cast<__nv_bfloat162*>(out + j * 8) = __floats2bfloat162_rn(a, c);
      }
    } else {
      float* po = p.workspace + ((static_cast<int64_t>(t) * w.H + h) * max_splits + w.split) * kV + col0 + 2 * tq;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<float2*>(po + j * 8) = make_float2(acc[j * 4 + 2 * hr] * inv, acc[j * 4 + 2 * hr + 1] * inv);
      if constexpr (kTwoSums) {
        if (wg == 0 && tq == 0) {
          const float m = m_of(hr);
          const int64_t part = (static_cast<int64_t>(t) * w.H + h) * max_splits + w.split;
          p.workspace[w.lse_base + part] = l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : -INFINITY;
        }
      }
    }
  }
}

}  // namespace

// Variant 11 (mla_decode_sm90_pair.cu): launches MlaDecodeSm90PairKernel on p.stream with the
// cache's tensor map and the plan of MlaDecodeAttentionSm90 (ctas CTAs of 256 threads).
void LaunchMlaDecodeSm90Pair(const CUtensorMap& map, const MlaDecodeParams& p, int nrb, int chunk, int max_splits,
                             int direct, unsigned ctas);
// Variant 12 (mla_decode_sm90_ring3.cu): launches MlaDecodeSm90Ring3Kernel likewise (CTAs of 384
// threads).
void LaunchMlaDecodeSm90Ring3(const CUtensorMap& map, const MlaDecodeParams& p, int nrb, int chunk, int max_splits,
                              int direct, unsigned ctas);

}  // namespace ds::cuda
