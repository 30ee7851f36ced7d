// The batch-1 MLA attention layer in one cooperative launch: see mla_attn_persistent.h. PTX
// sources: PTX ISA 8.x, "mma" (m16n8k16 .bf16), "ldmatrix" (.x4, .trans); the decode phase follows
// mla_decode_tc.cu's row-tile kernel (one 16-row tile, 8 warps splitting S's k-steps and O's
// columns).
#include "backend/cuda/mla_attn_persistent.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/grid_barrier.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mla_decode_merge.cuh"
#include "backend/cuda/rmsnorm.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "common/check.h"
#include "common/logging.h"

namespace ds::cuda {
namespace {

using bf16 = __nv_bfloat16;
using ptx::Ldsm4;
using ptx::Ldsm4T;
using ptx::Mma;
using ptx::LdStreamNow;
using ptx::LoadSlice;
using ptx::MmaSlice;
using ptx::WarpSlice;
using ptx::WarpTile16;
using sm90::PackBf16;
using sm90::SmemAddr;

constexpr int kThreads = 256, kWarps = 8;
constexpr int kNope = 128, kRope = 64, kDqk = kNope + kRope, kVd = 128, kLat = 512, kD = kLat + kRope;
constexpr int kBN = 32;            // keys a split
constexpr int kLd = kD + 8;        // padded shared-memory row (bf16): conflict-free ldmatrix (as mla_decode_tc.cu)
constexpr int kKSteps = kD / 16;   // k16 steps of S = Q K^T
constexpr int kMaxHeads = 16;
constexpr int kMaxSplits = kMlaAttnPersistentMaxContext / kBN;  // phase 4's shared-memory LSEs / weights
constexpr int kMaxHidden = 8192;
constexpr int kUvParts = kVd / 16;  // 16-row parts of a head's W_UV
constexpr int kSpFloats = 4 * 4 * 32;  // a warp's partial scores: 4 n8 tiles x 4 values x 32 lanes

constexpr size_t kDecodeSmem = static_cast<size_t>(16 + kBN) * kLd * 2 + static_cast<size_t>(kWarps) * kSpFloats * 4;
constexpr size_t kMergeSmem = (2 * kLat + 2 * kMaxSplits) * 4;
constexpr size_t Align128(size_t n) { return (n + 127) / 128 * 128; }
// Dynamic shared memory: the phases' working area, then the block's first o_proj tile, staged by
// bulk copies in phase 3 or 4 (wo_stage_point): [16][heads * 128 + kWoPad] bf16 (<= 16 heads; the pad puts
// rows g and g + 1 in different banks for MmaTileSmem's 16-byte loads).
constexpr int kWoPad = 32;
static_assert(2 * kWarps == 16, "wo_stage_point 5 / 6: two o_proj tile rows a warp");
constexpr size_t kWorkSmem =
    Align128(std::max<size_t>(std::max<size_t>(kDecodeSmem, kMergeSmem), size_t{kMaxHidden} * 2));
constexpr size_t kWoOff = kWorkSmem;
constexpr size_t DynSmem() { return kWoOff + size_t{16} * (kMaxHeads * kVd + kWoPad) * 2; }

// ptx::CpAsync16 to a generic pointer into shared memory.
__device__ __forceinline__ void CpAsyncTo(void* dst, const void* src, bool valid) { ptx::CpAsync16(SmemAddr(dst), src, valid); }
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared as one bulk copy,
// completion counted on the mbarrier `bar` (PTX ISA 8.x, "cp.async.bulk"); the caller has
// announced the bytes (BarExpectTx, its one arrival).
__device__ __forceinline__ void BulkLoad(void* dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   SmemAddr(dst)),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void WaitStaged(uint64_t* bar) {
  while (!sm90::BarTryWait(SmemAddr(bar), 0)) {
  }
}

// One warp: 16 weight rows held in shared memory (row r at w + r * pitch, bf16) times the
// activations x (shared memory) over `steps` * 32 elements: WarpTile16Cols's fragments and mma
// order (every column of B the same vector), so d[0] / d[2] are rows g / g + 8.
__device__ __forceinline__ void MmaTileSmem(const bf16* w, int64_t pitch, const bf16* x, int steps, float (&d)[4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const uint4* ra = reinterpret_cast<const uint4*>(w + g * pitch) + q;
  const uint4* rb = reinterpret_cast<const uint4*>(w + (g + 8) * pitch) + q;
  const uint4* x4 = reinterpret_cast<const uint4*>(x) + q;
#pragma unroll 8
  for (int s = 0; s < steps; ++s) {
    const uint4 va = ra[4 * s], vb = rb[4 * s], xv = x4[4 * s];
    Mma(d, va.x, vb.x, va.y, vb.y, xv.x, xv.y);
    Mma(d, va.z, vb.z, va.w, vb.w, xv.z, xv.w);
  }
}

// 16-row tiles t = blockIdx.x, + grid, ... of a [rows, K] bf16 weight times xs (shared memory,
// K bf16): each tile's K split over the 8 warps (K / 8 a warp, a multiple of 32), the warps' sums
// added in warp order by 16 threads, out(row, value). row_ptr(r) gives row r's first weight.
// first_s: when not null, the block's first tile staged in shared memory ([16] rows of K at
// first_pitch).
// tile_row(t): tile t's first row (16 rows from it); done(t): called by thread 0 once tile t's
// outputs are written by the block (after a block barrier).
template <int kPf, class RowPtr, class Out, class TileRow, class Done>
__device__ __forceinline__ void GemvTiles(int64_t rows, int64_t K, const bf16* xs, float (*s_red)[16], RowPtr row_ptr,
                                          Out out, const bf16* first_s, int64_t first_pitch, TileRow tile_row, Done done) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t kw = K / kWarps, k0 = warp * kw;
  for (int64_t t = blockIdx.x; t < rows / 16; t += gridDim.x) {
    const int64_t r0 = tile_row(t);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    if (first_s != nullptr && t == blockIdx.x) MmaTileSmem(first_s + k0, first_pitch, xs + k0, static_cast<int>(kw / 32), d);
    else WarpTile16<kPf>(row_ptr(r0 + g) + k0, row_ptr(r0 + g + 8) + k0, xs + k0, xs + k0, static_cast<int>(kw / 32), d);
    if (q == 0) {
      s_red[warp][g] = d[0];
      s_red[warp][g + 8] = d[2];
    }
    __syncthreads();
    if (threadIdx.x < 16) {
      float v = 0.f;
      for (int w = 0; w < kWarps; ++w) v += s_red[w][threadIdx.x];
      out(r0 + threadIdx.x, v);
    }
    __syncthreads();
    if (threadIdx.x == 0) done(t);
  }
}
template <int kPf, class RowPtr, class Out>
__device__ __forceinline__ void GemvTiles(int64_t rows, int64_t K, const bf16* xs, float (*s_red)[16], RowPtr row_ptr,
                                          Out out, const bf16* first_s, int64_t first_pitch) {
  GemvTiles<kPf>(rows, K, xs, s_red, row_ptr, out, first_s, first_pitch, [](int64_t t) { return t * 16; }, [](int64_t) {});
}

// Timing stamp k of this block (MlaAttnPersistentParams::phase_ns); `sync` first so that the
// stamp follows every warp's work. Uniform per launch (a kernel argument).
__device__ __forceinline__ void Stamp(uint64_t* phase_ns, int k, bool sync) {
  if (phase_ns == nullptr) return;
  if (sync) __syncthreads();
  if (threadIdx.x == 0) phase_ns[blockIdx.x * kMlaAttnPersistentStamps + k] = dev::GlobalTimerNs();
}

// cp.asyncs of a 32-key split's cache rows into Ks ([kBN][kLd]); keys >= kend zero-filled. only
// >= 0: row `only` alone; else every row but `skip`.
__device__ __forceinline__ void IssueSplitRows(const MlaAttnPersistentParams& p, bf16* Ks, int split, int ctx, int only,
                                               int skip) {
  const int bs = static_cast<int>(p.block_size);
  const int kbeg = split * kBN, kend = min(ctx, kbeg + kBN);
  const int64_t page = p.block_table[kbeg / bs];
  const bf16* src_base = p.cache + (page * bs + kbeg % bs) * kD;  // a 32-key split lies inside one page
  if (only >= 0) {
    for (int e = threadIdx.x; e < kD / 8; e += kThreads)
      CpAsyncTo(Ks + only * kLd + e * 8, src_base + static_cast<int64_t>(only) * kD + e * 8, kbeg + only < kend);
    return;
  }
#pragma unroll 3
  for (int c = threadIdx.x; c < kBN * (kD / 8); c += kThreads) {
    const int j = c / (kD / 8), e = c % (kD / 8);
    if (j == skip) continue;
    CpAsyncTo(Ks + j * kLd + e * 8, src_base + static_cast<int64_t>(j) * kD + e * 8, kbeg + j < kend);
  }
}

// Phase 1's tile t -> its first row: tile t (absorb_overlap: q_nope tiles of every head, then
// q_pe, then kv_a).
__device__ __forceinline__ int64_t PhaseOneTileRow(int64_t t, int64_t H, bool overlap) {
  if (!overlap) return t * 16;
  const int64_t n_nope = H * (kNope / 16), n_pe = H * (kRope / 16);
  if (t < n_nope) return (t / (kNope / 16)) * kDqk + (t % (kNope / 16)) * 16;
  if (t < n_nope + n_pe) return ((t - n_nope) / (kRope / 16)) * kDqk + kNope + ((t - n_nope) % (kRope / 16)) * 16;
  return H * kDqk + (t - n_nope - n_pe) * 16;
}

// kPdl: launched as a programmatic dependent (MlaAttnPersistentParams::pdl): the wait for the
// previous kernel comes first (launch.cuh's rule), then the release of the next; a separate
// instantiation, so the default kernel's code is the one measured without it.
// kPf: the weight loads' L2 fetch size (MlaAttnPersistentParams::l2_fetch; ptx::LdStreamPf).
// kProd (session 28; MlaAttnPersistentSpecialized): the runner's form fixed at compile time
// (wo_stage_point 3, absorb_overlap, split_counter, in_norm, no stamps, no phase-1 stop; since
// session 35 the column-split merge at every context, merge_cols_min_splits 1), so the
// hot path holds no code for the other forms: the kernel runs each phase's code once a launch,
// cold, and jumps over untaken blocks were where its warps waited for instructions (ncu, session
// 28: a quarter of its warp samples "no instruction").
// kH / kHd (with kProd): the heads and hidden size fixed too (16 and 2048: DeepSeek-V2-Lite,
// Moonlight), so loops over them have no remainder blocks to jump over; 0: from p.
template <bool kPdl, int kPf = 0, bool kProd = false, int kH = 0, int kHd = 0>
__global__ void __launch_bounds__(kThreads, 1) MlaAttnPersistentKernel(MlaAttnPersistentParams p) {
  if constexpr (kPdl) dev::PdlWaitThenRelease();
  const int wo_point = kProd ? 3 : p.wo_stage_point;
  uint64_t* const phase_ns = kProd ? nullptr : p.phase_ns;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ float s_red[kWarps][16];
  __shared__ float s_norm[32];
  __shared__ __align__(16) bf16 s_newrow[kD];  // the new token's cache row (phase 3's norm block)
  __shared__ __align__(8) uint64_t s_bar[1];   // the staged o_proj tile
  __shared__ uint64_t s_base;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int grid = static_cast<int>(gridDim.x);
  const int64_t Hd = kHd > 0 ? int64_t{kHd} : p.hidden, H = kH > 0 ? int64_t{kH} : p.heads, Rq = H * kDqk, Ko = H * kVd;
  const int64_t wo_pitch = Ko + kWoPad;
  bf16* wo_s = reinterpret_cast<bf16*>(smem_raw + kWoOff);  // [16][wo_pitch]
  // Phase 2's W_UK tiles (blocks >= 1: unit (b - 1) * 8 + warp first), phase 4's (head, part)
  // units, phase 5's o_proj tiles: the first of each loaded ahead.
  // absorb_overlap (p.nope_ready): phase 1's tiles in the order q_nope (every head), q_pe, kv_a,
  // and the absorption on the blocks with the fewest phase-1 tiles (uk_lo on: tile counts differ
  // by at most one, blocks >= n1 % grid have the fewer), each starting once every q_nope tile is
  // written (the counter), while the other blocks still stream their q_pe / kv_a tiles: no
  // barrier 1. Otherwise the absorption runs on blocks >= 1 between barriers 1 and 2.
  const bool overlap = kProd || p.nope_ready != nullptr;
  // split_counter (p.split_ready, with absorb_overlap): no barrier 2 either. Each q_pe / kv_a
  // tile and each absorbing block (after its units) bumps the word; a decode block waits for all
  // of them (split_target) before its Q tile; the other blocks go on to barrier 3.
  const bool split_counter = kProd || (overlap && p.split_ready != nullptr);
  const int64_t n1 = (Rq + kD) / 16, n_nope = H * (kNope / 16);
  const int uk_lo = overlap ? static_cast<int>(n1 % grid) : 1;
  const int64_t uk_units = H * (kLat / 16), uk_warps = int64_t{grid - uk_lo} * kWarps;
  const int64_t uk_first = (int64_t{blockIdx.x} - uk_lo) * kWarps + warp;
  const bool uk_block = static_cast<int>(blockIdx.x) >= uk_lo && (int64_t{blockIdx.x} - uk_lo) * kWarps < uk_units;
  const uint32_t split_target = static_cast<uint32_t>(
      std::min<int64_t>(grid - uk_lo, (uk_units + kWarps - 1) / kWarps) + (n1 - n_nope));
  const int64_t uv_units = H * kUvParts;
  const bool wo_staged = blockIdx.x < Hd / 16;
  // The block's o_proj tile into shared memory (thread 0): one bulk copy a row (padded pitch),
  // completion on s_bar[0] (phase 5 waits for it).
  // wo_stage_point 5 / 6 split the announcement (thread 0, wo_expect) from the copies (lane 0 of
  // each warp, its two rows, wo_rows), so that no one thread spends ~16 x 90 ns issuing them.
  const auto wo_expect = [&]() { sm90::BarExpectTx(SmemAddr(&s_bar[0]), static_cast<uint32_t>(16 * Ko * 2)); };
  const auto wo_rows = [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r)
      BulkLoad(wo_s + r * wo_pitch, p.wo + (static_cast<int64_t>(blockIdx.x) * 16 + r) * Ko, static_cast<uint32_t>(Ko * 2),
               SmemAddr(&s_bar[0]));
  };
  const auto issue_wo = [&]() {
    wo_expect();
    wo_rows(0, 16);
  };
  // Points 5 / 6, a split block: the copies of its rows 2 w, 2 w + 1 by warp w's lane 0.
  const bool wo_spread = wo_staged && (wo_point == 5 || wo_point == 6);
  Stamp(phase_ns, 0, false);
  if (threadIdx.x == 0) {
    s_base = grid::GridBase(p.sync);  // before this block's first arrival
    sm90::BarInit(SmemAddr(&s_bar[0]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // The token's RoPE angle for pair i = lane (phase 3 rotates pair `lane`), loaded now so that its
  // latency is not on a later phase's path.
  const int pos = *p.position;
  const bool rotate = pos >= 0 && pos < p.max_pos;
  if (phase_ns != nullptr) {
    asm volatile("" ::"r"(pos));  // the stamp after the read's value is in
    Stamp(phase_ns, 16, false);
  }
  float rope_c = 1.f, rope_s = 0.f;
  if (rotate) {
    rope_c = p.cos[static_cast<int64_t>(pos) * (kRope / 2) + lane];
    rope_s = p.sin[static_cast<int64_t>(pos) * (kRope / 2) + lane];
  }
  // Phase 1: q and kv_a (x in shared memory).
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);
  if (kProd || p.in_residual != nullptr) {
    // The layer's input norm, in every block (MlaAttnPersistentParams::in_residual): RmsNorm's
    // fp32 operations per element (o = v * inv * w), the sum of squares in this block's order.
    norm::BlockRmsNormRowToBf16<kMaxHidden / 4 / kThreads, kThreads>(p.in_residual, p.in_norm_w, Hd, p.in_eps, xs, s_norm);
  } else {
    for (int64_t i = threadIdx.x; i < Hd / 8; i += kThreads)
      reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(p.x16)[i];
  }
  __syncthreads();
  Stamp(phase_ns, 17, false);
  const uint64_t base = s_base;
  GemvTiles<kPf>(
      Rq + kD, Hd, xs, s_red,
      [&](int64_t r) { return r < Rq ? p.wq + r * Hd : p.wkva + (r - Rq) * Hd; },
      [&](int64_t r, float v) {
        if (r < Rq) p.q32[r] = v;
        else p.kva32[r - Rq] = v;
      },
      nullptr, 0,
      [&](int64_t t) -> int64_t { return PhaseOneTileRow(t, H, overlap); },
      [&](int64_t t) {  // thread 0, after the block barrier that follows the tile's stores
        if (t == blockIdx.x) Stamp(phase_ns, 18, false);
        if (overlap && t < n_nope) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.nope_ready) : "memory");
        if (split_counter && t >= n_nope) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.split_ready) : "memory");
      });
  // Ahead of barrier 1 (absorb_overlap: of the wait for q_nope): this warp's first W_UK tile.
  // (absorb_overlap: its second one too, since these warps take two units of V2-Lite's 512.)
  WarpSlice uk, uk2;
  const int64_t uk_second = uk_first + uk_warps;
  if (uk_block && uk_first < uk_units) {
    const bf16* w = p.w_uk_t + uk_first * 16 * kNope;
    LoadSlice<kPf>(w + g * kNope, w + (g + 8) * kNope, kNope / 32, uk);
  }
  if (overlap && uk_block && uk_second < uk_units) {
    const bf16* w = p.w_uk_t + uk_second * 16 * kNope;
    LoadSlice<kPf>(w + g * kNope, w + (g + 8) * kNope, kNope / 32, uk2);
  }
  Stamp(phase_ns, 1, true);
  if (!kProd && p.debug_stop_after_p1) return;
  int nbar = 0;
  if (!overlap) grid::GridBarrier(p.sync, base + (++nbar) * gridDim.x);
  Stamp(phase_ns, 2, false);

  // Phase 2: the absorption (blocks below uk_lo and past the units idle).
  if (uk_block) {  // block-uniform (the __syncthreads below); warps past the units skip the loop
    if (overlap) {  // every q_nope tile written (the counter's release adds; reset after barrier 2, or 3 with split_counter)
      if (threadIdx.x == 0)
        while (grid::LdAcquire(p.nope_ready) < static_cast<uint32_t>(n_nope)) {
        }
      __syncthreads();
      Stamp(phase_ns, 2, false);
    }
    // The absorption: q_nope of every head as bf16 in shared memory, then 16-row tiles of
    // W_UK_h^T (rows c, K = 128) a warp; q_lat rounded to bf16 (the decode's Q operand).
    bf16* qn = xs;  // [H][128]
    constexpr int kQnPer = kMaxHeads * kNope / 4 / kThreads;  // float4s a thread (all loads first)
    float4 qv[kQnPer];
#pragma unroll
    for (int j = 0; j < kQnPer; ++j) {
      const int64_t i = threadIdx.x + j * kThreads;  // float4 index: head i / 32, element 4 (i % 32)
      if (i < H * kNope / 4) qv[j] = __ldcg(reinterpret_cast<const float4*>(p.q32 + (i / 32) * kDqk) + i % 32);
    }
#pragma unroll
    for (int j = 0; j < kQnPer; ++j) {
      const int64_t i = threadIdx.x + j * kThreads;
      if (i < H * kNope / 4) {
        reinterpret_cast<__nv_bfloat162*>(qn)[2 * i] = __floats2bfloat162_rn(qv[j].x, qv[j].y);
        reinterpret_cast<__nv_bfloat162*>(qn)[2 * i + 1] = __floats2bfloat162_rn(qv[j].z, qv[j].w);
      }
    }
    __syncthreads();
    for (int64_t u = uk_first; u < uk_units; u += uk_warps) {
      const int64_t h = u / (kLat / 16), c0 = (u % (kLat / 16)) * 16;
      const bf16* w = p.w_uk_t + (h * kLat + c0) * kNope;
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      if (u == uk_first) MmaSlice(uk, qn + h * kNope, kNope / 32, d);
      else if (overlap && u == uk_second) MmaSlice(uk2, qn + h * kNope, kNope / 32, d);
      else WarpTile16<kPf>(w + g * kNope, w + (g + 8) * kNope, qn + h * kNope, qn + h * kNope, kNope / 32, d);
      if (tq == 0) {
        p.qlat16[h * kLat + c0 + g] = __float2bfloat16_rn(d[0]);
        p.qlat16[h * kLat + c0 + g + 8] = __float2bfloat16_rn(d[2]);
      }
    }
    if (split_counter) {  // this block's q_lat written
      __syncthreads();
      if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.split_ready) : "memory");
    }
  }
  // Ahead of barrier 2: the cache rows of this block's first split, all but the new token's
  // (phase 3 computes it). Ks lies past everything phases 1-2 keep in shared memory (xs / qn:
  // at most 16 KB < Qs's 18.7 KB).
  const int64_t smax = (p.max_context + kBN - 1) / kBN;
  const int ctx = *p.context_len;
  // (A context past the workspace's capacity or kMlaAttnPersistentMaxContext is a caller bug: its
  // splits are not computed rather than written out of bounds.)
  const int S = static_cast<int>(std::min<int64_t>(std::min<int64_t>((ctx + kBN - 1) / kBN, smax), kMaxSplits));
  bf16* Qs = reinterpret_cast<bf16*>(smem_raw);  // [16][kLd]
  bf16* Ks = Qs + 16 * kLd;                      // [kBN][kLd]
  float* Sp = reinterpret_cast<float*>(Ks + kBN * kLd);  // [kWarps][kSpFloats]
  const int first_split = blockIdx.x, new_split = (ctx - 1) / kBN;
  // The block of the new token's split (block 0 when no split holds it) normalises kv_a into the
  // cache row in phase 3, while its Q / K tiles load.
  const int norm_block = ctx >= 1 && new_split < S ? new_split % grid : 0;
  const int64_t slot = *p.slot;
  if (first_split < S) IssueSplitRows(p, Ks, first_split, ctx, -1, first_split == new_split ? ctx - 1 - new_split * kBN : -1);
  Stamp(phase_ns, 3, true);
  if (!split_counter) {
    grid::GridBarrier(p.sync, base + (++nbar) * gridDim.x);
    // absorb_overlap: every block has passed its wait and every q_nope tile has counted: the
    // counter goes back to zero for the next launch (stream-ordered after this one).
    if (overlap && blockIdx.x == 0 && threadIdx.x == 0) *p.nope_ready = 0u;
  } else if (first_split < S || static_cast<int>(blockIdx.x) == norm_block) {  // q_lat, q_pe and kv_a written
    if (threadIdx.x == 0)
      while (grid::LdAcquire(p.split_ready) < split_target) {
      }
    __syncthreads();
  }
  Stamp(phase_ns, 4, false);
  // wo_stage_point 3-6: the o_proj tile's copies go out in phase 3, where DRAM idles (the cache
  // rows aside): blocks without a split now (point 4: every block now); a split's block once its
  // first Q / K tiles are in shared memory (below; 5 / 6: over its warps, there or after its
  // decode), so the copies overlap its decode math.
  if (threadIdx.x == 0 && wo_staged && (wo_point == 4 || (wo_point >= 3 && first_split >= S))) issue_wo();

  // Phase 3: split-KV decode, 32-key splits; all heads form one 16-row tile (rows >= H zero).
  float* lse_base = p.workspace + H * smax * kLat;
  {
    if (first_split < S) {
      // The Q tile: q_lat by cp.async; q_pe rotated here from q32 (bf16), as RotateHead.
      for (int idx = threadIdx.x; idx < 16 * (kLat / 8); idx += kThreads) {
        const int r = idx / (kLat / 8), c = (idx % (kLat / 8)) * 8;
        CpAsyncTo(Qs + r * kLd + c, p.qlat16 + (r < H ? r : 0) * kLat + c, r < H);
      }
      // (Every thread's q_pe loads first, then the rotations: one L2 round trip, not two.)
      constexpr int kPeIt = 16 * (kRope / 2) / kThreads;
      static_assert(kPeIt * kThreads == 16 * (kRope / 2), "q_pe pairs a thread");
      float pa[kPeIt], pb[kPeIt];
#pragma unroll
      for (int it = 0; it < kPeIt; ++it) {
        const int idx = threadIdx.x + it * kThreads, r = idx / (kRope / 2), i = idx % (kRope / 2), half = kRope / 2;
        pa[it] = pb[it] = 0.f;
        if (r < H) {
          const float* v = p.q32 + r * kDqk + kNope;
          pa[it] = __ldcg(v + (rotate && p.interleave ? 2 * i : i));
          pb[it] = __ldcg(v + (rotate && p.interleave ? 2 * i + 1 : i + half));
        }
      }
#pragma unroll
      for (int it = 0; it < kPeIt; ++it) {
        const int idx = threadIdx.x + it * kThreads, r = idx / (kRope / 2), i = idx % (kRope / 2), half = kRope / 2;
        float o0 = pa[it], o1 = pb[it];  // (rows >= H: zeros)
        if (r < H && rotate) {
          o0 = pa[it] * rope_c - pb[it] * rope_s;  // i == lane: this lane's angle
          o1 = pb[it] * rope_c + pa[it] * rope_s;
        }
        Qs[r * kLd + kLat + i] = __float2bfloat16_rn(o0);
        Qs[r * kLd + kLat + i + half] = __float2bfloat16_rn(o1);
      }
    }
    if (blockIdx.x == norm_block) {
      // The kv norm (RmsNorm's loop form: elements t and t + 256 a thread) and k_pe's RoPE (warp 0,
      // pair `lane`) into s_newrow, then the cache row at the slot (a negative slot writes no row;
      // the decode then reads the row in the cache, as the unfused path would; an out-of-range
      // position no rotation, as MlaKvRope). kva32 keeps the normalised c_kv (fp32).
      const float v0 = __ldcg(p.kva32 + threadIdx.x), v1 = __ldcg(p.kva32 + threadIdx.x + kThreads);
      const float w0 = p.kva_norm_w[threadIdx.x], w1 = p.kva_norm_w[threadIdx.x + kThreads];  // loaded with v
      float ka = 0.f, kb = 0.f;
      if (warp == 0) {
        const float* kpe = p.kva32 + kLat;
        ka = __ldcg(kpe + (p.interleave ? 2 * lane : lane));
        kb = __ldcg(kpe + (p.interleave ? 2 * lane + 1 : lane + kRope / 2));
      }
      float ss = v0 * v0;
      ss += v1 * v1;
      const float inv = rsqrtf(dev::BlockSum(ss, s_norm) / static_cast<float>(kLat) + p.eps);
      const float o0 = v0 * inv * w0, o1 = v1 * inv * w1;
      p.kva32[threadIdx.x] = o0;
      p.kva32[threadIdx.x + kThreads] = o1;
      s_newrow[threadIdx.x] = __float2bfloat16_rn(o0);
      s_newrow[threadIdx.x + kThreads] = __float2bfloat16_rn(o1);
      if (warp == 0) {
        s_newrow[kLat + lane] = __float2bfloat16_rn(rotate ? ka * rope_c - kb * rope_s : (p.interleave ? 0.f : ka));
        s_newrow[kLat + lane + kRope / 2] = __float2bfloat16_rn(rotate ? kb * rope_c + ka * rope_s : (p.interleave ? 0.f : kb));
      }
      __syncthreads();
      if (slot >= 0 && threadIdx.x < kD / 8) {
        const uint4 v = reinterpret_cast<const uint4*>(s_newrow)[threadIdx.x];
        bf16* dst = p.cache + slot * kD;
        if (rotate || threadIdx.x < kLat / 8) reinterpret_cast<uint4*>(dst)[threadIdx.x] = v;
      }
    }
    const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scores in base 2
    const int ks_beg = warp * kKSteps / kWarps, ks_end = (warp + 1) * kKSteps / kWarps;
    if (first_split >= S) {
      Stamp(phase_ns, 5, false);
      if (phase_ns != nullptr && threadIdx.x == 0)  // no decode sub-steps here (the report skips zeros)
        for (int k = 19; k <= 21; ++k) phase_ns[blockIdx.x * kMlaAttnPersistentStamps + k] = 0;
    }
    for (int split = first_split; split < S; split += grid) {
      const int new_j = split == new_split ? ctx - 1 - split * kBN : -1;  // the new token's row here
      if (split != first_split) {
        __syncthreads();  // the previous split's Ks / Sp reads done
        IssueSplitRows(p, Ks, split, ctx, -1, new_j);
      }
      if (new_j >= 0) {
        if (slot >= 0 && rotate) {  // this block computed it (norm_block)
          for (int e = threadIdx.x; e < kD / 8; e += kThreads)
            reinterpret_cast<uint4*>(Ks + new_j * kLd)[e] = reinterpret_cast<const uint4*>(s_newrow)[e];
        } else if (slot >= 0) {  // no rotation: the cache row's rope part is left as it was
          for (int e = threadIdx.x; e < kLat / 8; e += kThreads)
            reinterpret_cast<uint4*>(Ks + new_j * kLd)[e] = reinterpret_cast<const uint4*>(s_newrow)[e];
          for (int e = kLat / 8 + threadIdx.x; e < kD / 8; e += kThreads)
            CpAsyncTo(Ks + new_j * kLd + e * 8, p.cache + slot * kD + e * 8, true);
        } else {
          IssueSplitRows(p, Ks, split, ctx, new_j, -1);
        }
      }
      CpAsyncWaitAll();
      if (split == first_split && wo_spread && threadIdx.x == 0) wo_expect();  // before the barrier below
      __syncthreads();  // Q and K visible
      if (split == first_split) {
        Stamp(phase_ns, 5, false);
        if (threadIdx.x == 0 && wo_staged && wo_point == 3) issue_wo();
        if (lane == 0 && wo_spread && wo_point == 5) wo_rows(2 * warp, 2 * warp + 2);
      }
      const int kbeg = split * kBN, kend = min(ctx, kbeg + kBN);
      // S = Q K^T over this warp's k-steps, then summed over the warps (the same order in all).
      float sc[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
      for (int ks = ks_beg; ks < ks_end; ++ks) {
        uint32_t a0, a1, a2, a3;
        Ldsm4(SmemAddr(Qs + (lane & 15) * kLd + ks * 16 + (lane >> 4) * 8), a0, a1, a2, a3);
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          const int m = lane >> 3;
          uint32_t b0, b1, b2, b3;
          Ldsm4(SmemAddr(Ks + (nb * 16 + (m >> 1) * 8 + (lane & 7)) * kLd + ks * 16 + (m & 1) * 8), b0, b1, b2, b3);
          Mma(sc[2 * nb], a0, a1, a2, a3, b0, b1);
          Mma(sc[2 * nb + 1], a0, a1, a2, a3, b2, b3);
        }
      }
      float* my = Sp + warp * kSpFloats;
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) my[(j * 4 + c) * 32 + lane] = sc[j][c];
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float v = 0.f;
          for (int w = 0; w < kWarps; ++w) v += Sp[w * kSpFloats + (j * 4 + c) * 32 + lane];
          sc[j][c] = v;
        }
      if (split == first_split) Stamp(phase_ns, 19, false);
      // Softmax of rows g and g + 8 over this split's keys (each row's 32 scores in one quad).
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = kbeg + j * 8 + 2 * tq + (c & 1);
          const float v = key < kend ? sc[j][c] * sl2 : -INFINITY;
          sc[j][c] = v;
          mx[c >> 1] = fmaxf(mx[c >> 1], v);
        }
      float muse[2], lsum[2] = {0.f, 0.f};
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
        muse[hr] = mx[hr] == -INFINITY ? 0.f : mx[hr];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float pv = exp2f(sc[j][c] - muse[c >> 1]);
          sc[j][c] = pv;
          lsum[c >> 1] += pv;
        }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        lsum[hr] += __shfl_xor_sync(0xffffffffu, lsum[hr], 1);
        lsum[hr] += __shfl_xor_sync(0xffffffffu, lsum[hr], 2);
      }
      // O = P V over this warp's 64 latent columns (8 n8 tiles).
      float acc[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        const uint32_t a0 = PackBf16(sc[2 * kk][0], sc[2 * kk][1]), a1 = PackBf16(sc[2 * kk][2], sc[2 * kk][3]);
        const uint32_t a2 = PackBf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                       a3 = PackBf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) {
          const int m = lane >> 3;
          const int col = warp * 64 + nb * 16 + (m >> 1) * 8;
          const int key = kk * 16 + (m & 1) * 8 + (lane & 7);
          uint32_t b0, b1, b2, b3;
          Ldsm4T(SmemAddr(Ks + key * kLd + col), b0, b1, b2, b3);
          Mma(acc[2 * nb], a0, a1, a2, a3, b0, b1);
          Mma(acc[2 * nb + 1], a0, a1, a2, a3, b2, b3);
        }
      }
      if (split == first_split) Stamp(phase_ns, 20, true);
      // The split's normalised partial and its log-sum-exp (natural log) for rows (heads) < H.
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int h = g + hr * 8;
        if (h >= H) continue;
        const int64_t part = h * smax + split;
        float* po = p.workspace + part * kLat + warp * 64;
        const bool empty = !(lsum[hr] > 0.f);
        const float inv = empty ? 0.f : 1.f / lsum[hr];
#pragma unroll
        for (int n = 0; n < 8; ++n)
          *reinterpret_cast<float2*>(po + n * 8 + 2 * tq) = make_float2(acc[n][2 * hr] * inv, acc[n][2 * hr + 1] * inv);
        if (warp == 0 && tq == 0) lse_base[part] = empty ? -INFINITY : (mx[hr] + log2f(lsum[hr])) * 0.6931471805599453f;
      }
      if (split == first_split) Stamp(phase_ns, 21, true);
    }
  }
  // wo_stage_point 6: a split block's o_proj copies once its decode is done (announced above).
  if (first_split < S && lane == 0 && wo_spread && wo_point == 6) wo_rows(2 * warp, 2 * warp + 2);
  // Ahead of barrier 3: this block's first phase-4 unit's W_UV rows (two a warp, 2 x 16 bytes a
  // lane each).
  uint4 uv[2][2];
  if (blockIdx.x < uv_units) {
    const int64_t h = blockIdx.x / kUvParts, part = blockIdx.x % kUvParts;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bf16* row = p.kv_b + (h * (kNope + kVd) + kNope + part * 16 + warp * 2 + r) * kLat;
      uv[r][0] = LdStreamNow<kPf>(row + 8 * lane);
      uv[r][1] = LdStreamNow<kPf>(row + 256 + 8 * lane);
    }
  }
  Stamp(phase_ns, 6, true);
  grid::GridBarrier(p.sync, base + (++nbar) * gridDim.x);
  // split_counter: every wait and every count of both words is behind this barrier: both back to
  // zero for the next launch.
  if (split_counter && blockIdx.x == 0 && threadIdx.x == 0) {
    *p.nope_ready = 0u;
    *p.split_ready = 0u;
  }
  Stamp(phase_ns, 7, false);

  // Phase 4: merge + W_UV, (head, 16-row part) units. The merge (mla_decode_merge.cuh's math: w_s
  // = exp(lse_s - max lse), o = sum w_s o_s / sum w_s, rounded to bf16; its own summation order)
  // with the weights in shared memory and the block's two halves taking every other split, 16
  // loads in flight a thread; then each row's lane-split dot product (MlaDecodeCombineUvKernel's
  // W_UV epilogue; the block's first unit's rows staged in shared memory).
  {
    float* s_o = reinterpret_cast<float*>(smem_raw);  // [512] merged o_lat (bf16 values)
    float* s_acc = s_o + kLat;                         // [512] the second half's sums
    float* s_l = s_acc + kLat;                         // [kMaxSplits] LSEs
    float* s_w = s_l + kMaxSplits;                     // [kMaxSplits] weights
    constexpr int kInFlight = 16;
    const int half = threadIdx.x >> 7, d = (threadIdx.x & 127) * 4;
    // wo_stage_point 0-2: the block's first o_proj tile into shared memory in this phase, one bulk
    // copy a row (padded pitch): at the phase's start, after the first unit's LSE loads, or after
    // its partials' loads (a block without a unit at the start). (Session 13 chose 2 when every
    // block staged at barrier 2 slowed phase 3's tile loads; session 22's point 3, the runner's
    // default, issues them in phase 3 after each split block's own tile loads: faster.)
    const auto stage_wo = [&](int point) {
      if (threadIdx.x != 0 || !wo_staged || wo_point >= 3 ||
          (blockIdx.x < uv_units ? wo_point : 0) != point)
        return;
      issue_wo();
    };
    // W_UV for unit (h, part) from the merged o_lat in s_o: each row's lane-split dot product
    // (MlaDecodeCombineUvKernel's W_UV epilogue; the block's first unit's rows from registers).
    const auto UvUnit = [&](int64_t h, int64_t part, bool first_unit) {
      float xo[16];
      mla::UvLaneColumns(s_o, lane, xo);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t n = part * 16 + warp * 2 + r;
        const bf16* row = p.kv_b + (h * (kNope + kVd) + kNope + n) * kLat;
        const uint4 w0 = first_unit ? uv[r][0] : *reinterpret_cast<const uint4*>(row + 8 * lane);
        const uint4 w1 = first_unit ? uv[r][1] : *reinterpret_cast<const uint4*>(row + 256 + 8 * lane);
        const float dot = dev::WarpSum(mla::UvLaneDot(xo, w0, w1));
        if (lane == 0) p.o16[h * kVd + n] = __float2bfloat16_rn(dot);
      }
    };
    stage_wo(0);
    // merge_cols (MlaAttnPersistentParams::head_ready, at >= merge_cols_min_splits splits): each
    // (head, part) unit merges only columns part x 64 .. + 63 of its head's partials (a 64-column
    // slice, not the whole head: 1 / 8 of the L2 reads), writes them into split 0's partial in place
    // (its own columns: no other unit reads them) and counts on the head's word; the W_UV loop
    // then waits for the head's 8 parts and reads the merged row back.
    // The weighted sum of splits first, first + step, ... (kN loads in flight) of the partials'
    // float4 column block at wsp, in split order; splits of weight 0 (LSE -inf) are not read.
    const auto weighted_splits = [&](const float* wsp, int first, int step, auto in_flight) {
      constexpr int kN = decltype(in_flight)::value;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      // As many rounds in every thread (the loads past S predicated off, a zero added): with a
      // round count per group, a warp whose two groups differ (an odd count of splits past 128 at
      // step 16) diverged, ~1 us a launch (session 35: 129 and 131 splits against 128 and 130).
      const int rounds = (S + step * kN - 1) / (step * kN);
      for (int k = 0, s0 = first; k < rounds; ++k, s0 += step * kN) {
        float4 v[kN];
#pragma unroll
        for (int i = 0; i < kN; ++i) {
          const int s = s0 + step * i;
          v[i] = s < S && s_w[s] > 0.f ? __ldcg(reinterpret_cast<const float4*>(wsp + static_cast<int64_t>(s) * kLat))
                                       : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int i = 0; i < kN; ++i) {
          const int s = s0 + step * i;
          const float w = s < S ? s_w[s] : 0.f;
          acc.x += w * v[i].x; acc.y += w * v[i].y; acc.z += w * v[i].z; acc.w += w * v[i].w;
        }
      }
      return acc;
    };
    // The weights' sum (every warp: lane-strided, then shuffles).
    const auto weight_sum = [&]() {
      float wsum = 0.f;
      for (int s = lane; s < S; s += 32) wsum += s_w[s];
      return dev::WarpSum(wsum);
    };
    // (kProd: merge_cols_min_splits 1, and S >= 1 for any context of >= 1 key; no one-loop merge code.)
    const bool merge_cols = kProd || (p.head_ready != nullptr && p.merge_cols_min_splits > 0 && S >= p.merge_cols_min_splits);
    for (int64_t u = blockIdx.x; u < uv_units; u += grid) {
      const int64_t h = u / kUvParts, part = u % kUvParts;
      const bool first_unit = u == blockIdx.x;
      for (int s = threadIdx.x; s < S; s += kThreads) s_l[s] = __ldcg(lse_base + h * smax + s);
      if (first_unit) stage_wo(1);
      __syncthreads();
      if (first_unit) Stamp(phase_ns, 8, false);
      // Every warp: the max LSE (lane-strided, then shuffles), then split s's weight by thread s.
      float gmax = -INFINITY;
      for (int s = lane; s < S; s += 32) gmax = fmaxf(gmax, s_l[s]);
      gmax = dev::WarpMax(gmax);
      for (int s = threadIdx.x; s < S; s += kThreads) s_w[s] = s_l[s] == -INFINITY ? 0.f : expf(s_l[s] - gmax);
      __syncthreads();
      if (first_unit) Stamp(phase_ns, 9, false);
      if (merge_cols) {
        // 16 groups of 16 threads: group k sums splits k, k + 16, ... of the slice's 64 columns (a
        // float4 a thread), 8 loads in flight; the groups' sums are added in group order.
        const int grp = threadIdx.x >> 4, c = static_cast<int>(part) * 64 + (threadIdx.x & 15) * 4;
        const float4 acc = weighted_splits(p.workspace + (h * smax) * kLat + c, grp, 16, std::integral_constant<int, 8>{});
        float* s_grp = s_o;  // [16][64] (s_o and s_acc)
        *reinterpret_cast<float4*>(s_grp + grp * 64 + (threadIdx.x & 15) * 4) = acc;
        if (first_unit) stage_wo(2);
        const float wsum = weight_sum();
        __syncthreads();
        if (first_unit) Stamp(phase_ns, 10, false);
        if (threadIdx.x < 64) {
          float m = 0.f;
#pragma unroll
          for (int k = 0; k < 16; ++k) m += s_grp[k * 64 + threadIdx.x];
          const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
          p.workspace[(h * smax) * kLat + part * 64 + threadIdx.x] = __bfloat162float(__float2bfloat16_rn(m * inv));
        }
        __syncthreads();  // the slice written (and s_grp, s_l, s_w free for the next unit)
        if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.head_ready + h) : "memory");
        if (first_unit) Stamp(phase_ns, 11, false);
        continue;
      }
      const float4 acc =
          weighted_splits(p.workspace + (h * smax) * kLat + d, half, 2, std::integral_constant<int, kInFlight>{});
      if (half == 1) *reinterpret_cast<float4*>(s_acc + d) = acc;
      if (first_unit) stage_wo(2);
      const float wsum = weight_sum();
      __syncthreads();
      if (first_unit) Stamp(phase_ns, 10, false);
      if (half == 0) {
        const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
        const float4 o = *reinterpret_cast<const float4*>(s_acc + d);
        s_o[d + 0] = __bfloat162float(__float2bfloat16_rn((acc.x + o.x) * inv));
        s_o[d + 1] = __bfloat162float(__float2bfloat16_rn((acc.y + o.y) * inv));
        s_o[d + 2] = __bfloat162float(__float2bfloat16_rn((acc.z + o.z) * inv));
        s_o[d + 3] = __bfloat162float(__float2bfloat16_rn((acc.w + o.w) * inv));
      }
      __syncthreads();
      if (first_unit) Stamp(phase_ns, 11, false);
      UvUnit(h, part, first_unit);
      __syncthreads();  // s_o, s_l, s_w reused by the next unit
    }
    // merge_cols: each unit's W_UV once its head's 8 slices are merged (the merges above come
    // first in every block, so no wait here depends on a later merge).
    if (merge_cols)
      for (int64_t u = blockIdx.x; u < uv_units; u += grid) {
        const int64_t h = u / kUvParts, part = u % kUvParts;
        if (threadIdx.x == 0)
          while (grid::LdAcquire(p.head_ready + h) < static_cast<uint32_t>(kUvParts)) {
          }
        __syncthreads();
        const float* merged = p.workspace + (h * smax) * kLat;
        for (int i = threadIdx.x; i < kLat / 4; i += kThreads)
          reinterpret_cast<float4*>(s_o)[i] = __ldcg(reinterpret_cast<const float4*>(merged) + i);
        __syncthreads();
        UvUnit(h, part, u == blockIdx.x);
        __syncthreads();  // s_o reused by the next unit
      }
    if (blockIdx.x < uv_units || phase_ns == nullptr) Stamp(phase_ns, 12, false);
    else for (int k = 8; k <= 12; ++k) Stamp(phase_ns, k, false);
  }
  Stamp(phase_ns, 13, true);
  grid::GridBarrier(p.sync, base + (++nbar) * gridDim.x, /*final=*/true);
  Stamp(phase_ns, 14, false);
  // merge_cols: every wait on the heads' words is behind this barrier: back to zero for the next launch.
  if (p.head_ready != nullptr && blockIdx.x == 0 && threadIdx.x < H) p.head_ready[threadIdx.x] = 0u;

  // Phase 5: o_proj (o in shared memory; the block's first tile staged).
  for (int64_t i = threadIdx.x; i < Ko / 8; i += kThreads)
    reinterpret_cast<uint4*>(xs)[i] = __ldcg(reinterpret_cast<const uint4*>(p.o16) + i);
  if (wo_staged) WaitStaged(&s_bar[0]);
  __syncthreads();
  GemvTiles<kPf>(
      Hd, Ko, xs, s_red, [&](int64_t r) { return p.wo + r * Ko; }, [&](int64_t r, float v) { p.out[r] = v; },
      wo_staged ? wo_s : nullptr, wo_pitch);
  Stamp(phase_ns, 15, true);
}

// pdl: the instantiation MlaAttnPersistentParams::pdl launches.
bool FitsCurrentDevice(bool pdl = false) {
  static std::mutex mu;
  static auto* known = new std::map<std::pair<int, bool>, bool>();
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known->find({dev, pdl}); it != known->end()) return it->second;
  int coop = 0;
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  bool fits = coop != 0;
  if (fits) {
    const auto kernel = pdl ? MlaAttnPersistentKernel<true> : MlaAttnPersistentKernel<false>;
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(DynSmem()));
    int per_sm = 0;
    DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, DynSmem()));
    fits = per_sm >= 1;
  }
  (*known)[{dev, pdl}] = fits;
  return fits;
}

}  // namespace

int64_t MlaAttnPersistentWorkspaceFloats(int64_t heads, int64_t max_context) {
  const int64_t splits = (std::max<int64_t>(max_context, 1) + kBN - 1) / kBN;
  return heads * splits * (kLat + 1);
}

bool MlaAttnPersistentSpecialized(const MlaAttnPersistentParams& p) {
  return p.specialize > 0 && !p.pdl && p.l2_fetch == 1 && p.wo_stage_point == 3 && p.nope_ready != nullptr &&
         p.split_ready != nullptr && p.in_residual != nullptr && p.head_ready != nullptr && p.merge_cols_min_splits == 1 &&
         p.phase_ns == nullptr && !p.debug_stop_after_p1;
}

std::string MlaAttnPersistentUnsupported(const MlaAttnPersistentParams& p) {
  std::ostringstream why;
  if (p.heads < 1 || p.heads > kMaxHeads || p.heads % 2 != 0) why << "heads " << p.heads << " (even, 2.." << kMaxHeads << "); ";
  if (p.hidden < 256 || p.hidden % 256 != 0 || p.hidden > kMaxHidden)
    why << "hidden " << p.hidden << " (a multiple of 256 up to " << kMaxHidden << "); ";
  if (p.block_size != 64) why << "block_size " << p.block_size << " (64); ";
  if (p.max_context < 1 || p.max_context > kMlaAttnPersistentMaxContext)
    why << "max_context " << p.max_context << " (1.." << kMlaAttnPersistentMaxContext << "); ";
  if (p.wo_stage_point < 0 || p.wo_stage_point > 6) why << "wo_stage_point " << p.wo_stage_point << " (0..6); ";
  if (p.l2_fetch < 0 || p.l2_fetch > 2) why << "l2_fetch " << p.l2_fetch << " (0, 1 or 2); ";
  if (p.specialize < 0 || p.specialize > 2) why << "specialize " << p.specialize << " (0..2); ";
  if ((p.in_residual != nullptr) != (p.in_norm_w != nullptr)) why << "in_residual and in_norm_w go together; ";
    if (p.split_ready != nullptr && p.nope_ready == nullptr) why << "split_ready needs nope_ready (absorb_overlap); ";
  if (reinterpret_cast<uintptr_t>(p.nope_ready) % 4 != 0 || reinterpret_cast<uintptr_t>(p.split_ready) % 4 != 0)
    why << "nope_ready / split_ready must be 4-byte aligned; ";
  if (p.merge_cols_min_splits < 0) why << "merge_cols_min_splits " << p.merge_cols_min_splits << " (>= 0); ";
  if (p.merge_cols_min_splits > 0 && p.head_ready == nullptr) why << "merge_cols_min_splits needs head_ready; ";
  if (reinterpret_cast<uintptr_t>(p.head_ready) % 4 != 0) why << "head_ready must be 4-byte aligned; ";
  if ((!p.x16 && !p.in_residual) || !p.wq || !p.wkva || !p.kva_norm_w || !p.w_uk_t || !p.kv_b || !p.wo || !p.position || !p.cos || !p.sin ||
      !p.cache || !p.slot || !p.block_table || !p.context_len || !p.q32 || !p.kva32 || !p.qlat16 || !p.workspace ||
      !p.o16 || !p.out || !p.sync)
    why << "null pointer; ";
  const auto misaligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
  if (misaligned(p.x16) || misaligned(p.wq) || misaligned(p.wkva) || misaligned(p.w_uk_t) || misaligned(p.kv_b) ||
      misaligned(p.wo) || misaligned(p.cache) || misaligned(p.workspace) || misaligned(p.o16) || misaligned(p.qlat16) ||
      misaligned(p.q32) || misaligned(p.in_residual) || misaligned(p.in_norm_w))
    why << "operands must be 16-byte aligned; ";
  if (reinterpret_cast<uintptr_t>(p.sync) % 8 != 0) why << "sync must be 8-byte aligned (a 64-bit counter); ";
  if (CurrentDeviceProps().sms < 2) why << "needs >= 2 SMs (without nope_ready, phase 2's absorption runs on blocks >= 1); ";
  if (why.str().empty() && !FitsCurrentDevice()) why << "no cooperative launch, or one block does not fit an SM; ";
  return why.str();
}

bool MlaAttnPersistent(const MlaAttnPersistentParams& p) {
  const std::string why = MlaAttnPersistentUnsupported(p);
  DS_CHECK(why.empty()) << "MlaAttnPersistent: " << why;
  const dim3 grid(static_cast<unsigned>(CurrentDeviceProps().sms));
  // pdl: where its own instantiation fits too.
  // (Not once a PDL launch was refused: the fallback would run the plain instantiation chosen here.)
  const bool pdl = p.pdl && !CooperativePdlRefused().load() && FitsCurrentDevice(true);
  // l2_fetch: its own instantiation (the same launch bounds and shared memory as the plain one).
  // specialize: the runner form's instantiation (level 2: with V2-Lite's shapes where they are those).
  const int f = pdl ? 0 : p.l2_fetch;
  const bool spec = !pdl && MlaAttnPersistentSpecialized(p);
  void (*plain)(MlaAttnPersistentParams) =
      spec && p.specialize >= 2 && p.heads == 16 && p.hidden == 2048 ? MlaAttnPersistentKernel<false, 1, true, 16, 2048>
      : spec                                                         ? MlaAttnPersistentKernel<false, 1, true>
      : f == 2                                                       ? MlaAttnPersistentKernel<false, 2>
      : f == 1                                                       ? MlaAttnPersistentKernel<false, 1>
                                                                     : MlaAttnPersistentKernel<false>;
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(plain), static_cast<int>(DynSmem()));
  SetSmemCarveout(reinterpret_cast<const void*>(plain), p.carveout, 1, DynSmem());
  if (pdl) SetSmemCarveout(reinterpret_cast<const void*>(MlaAttnPersistentKernel<true>), p.carveout, 1, DynSmem());
  return LaunchCooperativeOrPdl("MlaAttnPersistent", pdl, MlaAttnPersistentKernel<true>, plain, grid, dim3(kThreads),
                                DynSmem(), p.stream, p);
}

}  // namespace ds::cuda
