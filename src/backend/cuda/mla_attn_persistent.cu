// The batch-1 MLA attention layer in one cooperative launch: see mla_attn_persistent.h. PTX
// sources: PTX ISA 8.x, "mma" (m16n8k16 .bf16), "ldmatrix" (.x4, .trans); the decode phase follows
// mla_decode_tc.cu's row-tile kernel (one 16-row tile, 8 warps splitting S's k-steps and O's
// columns).
#include "backend/cuda/mla_attn_persistent.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/grid_barrier.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mla_decode_merge.cuh"
#include "backend/cuda/rmsnorm.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

using bf16 = __nv_bfloat16;
using ptx::Ldsm4;
using ptx::Ldsm4T;
using ptx::Mma;
using ptx::WarpTile16;
using sm90::PackBf16;
using sm90::SmemAddr;

constexpr int kThreads = 256, kWarps = 8;
constexpr int kNope = 128, kRope = 64, kDqk = kNope + kRope, kVd = 128, kLat = 512, kD = kLat + kRope;
constexpr int kBN = 32;            // keys a split
constexpr int kLd = kD + 8;        // padded shared-memory row (bf16): conflict-free ldmatrix (as mla_decode_tc.cu)
constexpr int kKSteps = kD / 16;   // k16 steps of S = Q K^T
constexpr int kMaxHeads = 16;
constexpr int kMaxHidden = 8192;
constexpr int kUvParts = kVd / 16;  // 16-row parts of a head's W_UV
constexpr int kSpFloats = 4 * 4 * 32;  // a warp's partial scores: 4 n8 tiles x 4 values x 32 lanes

constexpr size_t kDecodeSmem = static_cast<size_t>(16 + kBN) * kLd * 2 + static_cast<size_t>(kWarps) * kSpFloats * 4;
constexpr size_t DynSmem() {
  return std::max<size_t>(kDecodeSmem, std::max<size_t>(size_t{kMaxHidden} * 2, size_t{kLat} * 4));
}

// L2 prefetch of [ptr, ptr + bytes) (a hint; bytes a multiple of 16, ptr 16-byte aligned), in
// pieces of at most 64 KB (PTX ISA 8.x, "cp.async.bulk.prefetch").
__device__ __forceinline__ void PrefetchL2(const void* ptr, int64_t bytes) {
  const char* c = static_cast<const char*>(ptr);
  for (int64_t off = 0; off < bytes; off += 65536) {
    const uint32_t n = static_cast<uint32_t>(bytes - off < 65536 ? bytes - off : 65536);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(c + off), "r"(n) : "memory");
  }
}

// 16-row tiles t = blockIdx.x, + grid, ... of a [rows, K] bf16 weight times xs (shared memory,
// K bf16): each tile's K split over the 8 warps (K / 8 a warp, a multiple of 32), the warps' sums
// added in warp order by 16 threads, out(row, value). row_ptr(r) gives row r's first weight.
template <class RowPtr, class Out>
__device__ __forceinline__ void GemvTiles(int64_t rows, int64_t K, const bf16* xs, float (*s_red)[16], RowPtr row_ptr,
                                          Out out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t kw = K / kWarps, k0 = warp * kw;
  for (int64_t t = blockIdx.x; t < rows / 16; t += gridDim.x) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    WarpTile16(row_ptr(t * 16 + g) + k0, row_ptr(t * 16 + g + 8) + k0, xs + k0, xs + k0, static_cast<int>(kw / 32), d);
    if (q == 0) {
      s_red[warp][g] = d[0];
      s_red[warp][g + 8] = d[2];
    }
    __syncthreads();
    if (threadIdx.x < 16) {
      float v = 0.f;
      for (int w = 0; w < kWarps; ++w) v += s_red[w][threadIdx.x];
      out(t * 16 + threadIdx.x, v);
    }
    __syncthreads();
  }
}

// Timing stamp k of this block (MlaAttnPersistentParams::phase_ns); `sync` first so that the
// stamp follows every warp's work. Uniform per launch (a kernel argument).
__device__ __forceinline__ void Stamp(uint64_t* phase_ns, int k, bool sync) {
  if (phase_ns == nullptr) return;
  if (sync) __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    phase_ns[blockIdx.x * kMlaAttnPersistentStamps + k] = t;
  }
}

__global__ void __launch_bounds__(kThreads, 1) MlaAttnPersistentKernel(MlaAttnPersistentParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float s_red[kWarps][16];
  __shared__ uint32_t s_gen0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int grid = static_cast<int>(gridDim.x);
  const int64_t Hd = p.hidden, H = p.heads, Rq = H * kDqk;
  Stamp(p.phase_ns, 0, false);
  if (threadIdx.x == 0) s_gen0 = grid::GridGeneration(p.sync);  // before this block's first arrival
  // Phase 1: q and kv_a (x in shared memory).
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);
  for (int64_t i = threadIdx.x; i < Hd / 8; i += kThreads)
    reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(p.x16)[i];
  __syncthreads();
  const uint32_t gen0 = s_gen0;
  GemvTiles(
      Rq + kD, Hd, xs, s_red,
      [&](int64_t r) { return r < Rq ? p.wq + r * Hd : p.wkva + (r - Rq) * Hd; },
      [&](int64_t r, float v) {
        if (r < Rq) p.q32[r] = v;
        else p.kva32[r - Rq] = v;
      });
  Stamp(p.phase_ns, 1, true);
  grid::GridBarrier(p.sync, gen0 + 1);
  Stamp(p.phase_ns, 2, false);

  // Phase 2 (first, with prefetch_l2: thread 0 asks L2 for this block's phase-4 W_UV rows and
  // phase-5 W_o rows).
  if (p.prefetch_l2 && threadIdx.x == 0) {
    for (int64_t u = blockIdx.x; u < H * kUvParts; u += grid)
      PrefetchL2(p.kv_b + ((u / kUvParts) * (kNope + kVd) + kNope + (u % kUvParts) * 16) * kLat, 16 * kLat * 2);
    for (int64_t t = blockIdx.x; t < Hd / 16; t += grid) PrefetchL2(p.wo + t * 16 * H * kVd, 16 * H * kVd * 2);
  }
  const int pos = *p.position;
  const bool rotate = pos >= 0 && pos < p.max_pos;
  if (blockIdx.x == 0) {
    // The kv norm (RmsNorm's routine at its 256-thread block size for 512) into the cache row,
    // then k_pe's RoPE into its tail (a negative slot writes no row; an out-of-range position
    // no rotation, as MlaKvRope), then q_pe's RoPE in place, a warp a head.
    const int64_t slot = *p.slot;
    bf16* dst = slot >= 0 ? p.cache + slot * kD : nullptr;
    norm::RmsNormRow<float>(p.kva32, nullptr, p.kva_norm_w, p.kva32, dst, kLat, p.eps);
    if (warp == 0 && dst != nullptr && rotate)
      rope::RopeKpeToCache(p.kva32 + kLat, dst + kLat, kRope, pos, p.cos, p.sin, p.interleave);
    for (int64_t h = warp; h < H && rotate; h += kWarps)
      rope::RopeHeadInPlace(p.q32 + h * kDqk + kNope, kRope, pos, p.cos, p.sin, p.interleave, nullptr);
  } else {
    // The absorption: q_nope of every head as bf16 in shared memory, then 16-row tiles of
    // W_UK_h^T (rows c, K = 128) a warp; q_lat rounded to bf16 (the decode's Q operand).
    bf16* qn = xs;  // [H][128]
    for (int64_t i = threadIdx.x; i < H * kNope; i += kThreads)
      qn[i] = __float2bfloat16_rn(__ldcg(p.q32 + (i / kNope) * kDqk + i % kNope));
    __syncthreads();
    const int64_t units = H * (kLat / 16), nw = int64_t{grid - 1} * kWarps;
    for (int64_t u = int64_t{blockIdx.x - 1} * kWarps + warp; u < units; u += nw) {
      const int64_t h = u / (kLat / 16), c0 = (u % (kLat / 16)) * 16;
      const bf16* w = p.w_uk_t + (h * kLat + c0) * kNope;
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      WarpTile16(w + g * kNope, w + (g + 8) * kNope, qn + h * kNope, qn + h * kNope, kNope / 32, d);
      if (tq == 0) {
        p.qlat16[h * kLat + c0 + g] = __float2bfloat16_rn(d[0]);
        p.qlat16[h * kLat + c0 + g + 8] = __float2bfloat16_rn(d[2]);
      }
    }
  }
  Stamp(p.phase_ns, 3, true);
  grid::GridBarrier(p.sync, gen0 + 2);
  Stamp(p.phase_ns, 4, false);

  // Phase 3: split-KV decode, 32-key splits; all heads form one 16-row tile (rows >= H zero).
  const int64_t smax = (p.max_context + kBN - 1) / kBN;
  const int ctx = *p.context_len;
  // (A context past the workspace's capacity is a caller bug: its splits are not computed rather
  // than written out of bounds.)
  const int S = static_cast<int>(std::min<int64_t>((ctx + kBN - 1) / kBN, smax));
  float* lse_base = p.workspace + H * smax * kLat;
  {
    bf16* Qs = reinterpret_cast<bf16*>(smem_raw);  // [16][kLd]
    bf16* Ks = Qs + 16 * kLd;                      // [kBN][kLd]
    float* Sp = reinterpret_cast<float*>(Ks + kBN * kLd);  // [kWarps][kSpFloats]
    if (blockIdx.x < S) {
      for (int idx = threadIdx.x; idx < 16 * (kD / 2); idx += kThreads) {
        const int r = idx / (kD / 2), c = (idx % (kD / 2)) * 2;
        __nv_bfloat162 v = __floats2bfloat162_rn(0.f, 0.f);
        if (r < H) {
          if (c < kLat) v = *reinterpret_cast<const __nv_bfloat162*>(p.qlat16 + r * kLat + c);
          else v = __floats2bfloat162_rn(__ldcg(p.q32 + r * kDqk + kNope + (c - kLat)),
                                         __ldcg(p.q32 + r * kDqk + kNope + (c - kLat) + 1));
        }
        *reinterpret_cast<__nv_bfloat162*>(Qs + r * kLd + c) = v;
      }
    }
    const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scores in base 2
    const int ks_beg = warp * kKSteps / kWarps, ks_end = (warp + 1) * kKSteps / kWarps;
    const int bs = static_cast<int>(p.block_size);
    for (int split = blockIdx.x; split < S; split += grid) {
      __syncthreads();  // Q visible; the previous split's Ks / Sp reads done
      const int kbeg = split * kBN, kend = min(ctx, kbeg + kBN);
      const int64_t page = p.block_table[kbeg / bs];
      const bf16* src_base = p.cache + (page * bs + kbeg % bs) * kD;  // a 32-key split lies inside one page
      for (int c = threadIdx.x; c < kBN * (kD / 8); c += kThreads) {
        const int j = c / (kD / 8), e = c % (kD / 8);
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (kbeg + j < kend) v = __ldcg(reinterpret_cast<const uint4*>(src_base + static_cast<int64_t>(j) * kD) + e);
        *reinterpret_cast<uint4*>(Ks + j * kLd + e * 8) = v;
      }
      __syncthreads();
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
    }
  }
  Stamp(p.phase_ns, 5, true);
  grid::GridBarrier(p.sync, gen0 + 3);
  Stamp(p.phase_ns, 6, false);

  // Phase 4: merge + W_UV, (head, 16-row part) units; MlaDecodeCombineUvKernel's operations (the
  // merge of mla_decode_merge.cuh rounded to bf16, then each row's lane-split dot product).
  {
    float* s_o = reinterpret_cast<float*>(smem_raw);  // [512]
    for (int64_t u = blockIdx.x; u < H * kUvParts; u += grid) {
      const int64_t h = u / kUvParts, part = u % kUvParts;
      if (threadIdx.x < kLat / 4) {
        const int d = threadIdx.x * 4;
        float4 acc;
        float wsum;
        mla::MergeSplits(p.workspace, lse_base + h * smax, h * smax, S, kLat, d, &acc, &wsum);
        const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
        s_o[d + 0] = __bfloat162float(__float2bfloat16_rn(acc.x * inv));
        s_o[d + 1] = __bfloat162float(__float2bfloat16_rn(acc.y * inv));
        s_o[d + 2] = __bfloat162float(__float2bfloat16_rn(acc.z * inv));
        s_o[d + 3] = __bfloat162float(__float2bfloat16_rn(acc.w * inv));
      }
      __syncthreads();
      float xo[16];
      mla::UvLaneColumns(s_o, lane, xo);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t n = part * 16 + warp * 2 + r;
        const bf16* row = p.kv_b + (h * (kNope + kVd) + kNope + n) * kLat;
        const float acc = dev::WarpSum(mla::UvLaneDot(xo, *reinterpret_cast<const uint4*>(row + 8 * lane),
                                                       *reinterpret_cast<const uint4*>(row + 256 + 8 * lane)));
        if (lane == 0) p.o16[h * kVd + n] = __float2bfloat16_rn(acc);
      }
      __syncthreads();  // s_o reused by the next unit
    }
  }
  Stamp(p.phase_ns, 7, true);
  grid::GridBarrier(p.sync, gen0 + 4);
  Stamp(p.phase_ns, 8, false);

  // Phase 5: o_proj (o in shared memory).
  const int64_t Ko = H * kVd;
  for (int64_t i = threadIdx.x; i < Ko / 8; i += kThreads)
    reinterpret_cast<uint4*>(xs)[i] = __ldcg(reinterpret_cast<const uint4*>(p.o16) + i);
  __syncthreads();
  GemvTiles(
      Hd, Ko, xs, s_red, [&](int64_t r) { return p.wo + r * Ko; }, [&](int64_t r, float v) { p.out[r] = v; });
  Stamp(p.phase_ns, 9, true);
}

bool FitsCurrentDevice() {
  static std::mutex mu;
  static auto* known = new std::map<int, bool>();
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known->find(dev); it != known->end()) return it->second;
  int coop = 0;
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  bool fits = coop != 0;
  if (fits) {
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaAttnPersistentKernel), static_cast<int>(DynSmem()));
    int per_sm = 0;
    DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, MlaAttnPersistentKernel, kThreads, DynSmem()));
    fits = per_sm >= 1;
  }
  (*known)[dev] = fits;
  return fits;
}

}  // namespace

int64_t MlaAttnPersistentWorkspaceFloats(int64_t heads, int64_t max_context) {
  const int64_t splits = (std::max<int64_t>(max_context, 1) + kBN - 1) / kBN;
  return heads * splits * (kLat + 1);
}

std::string MlaAttnPersistentUnsupported(const MlaAttnPersistentParams& p) {
  std::ostringstream why;
  if (p.heads < 1 || p.heads > kMaxHeads || p.heads % 2 != 0) why << "heads " << p.heads << " (even, 2.." << kMaxHeads << "); ";
  if (p.hidden < 256 || p.hidden % 256 != 0 || p.hidden > kMaxHidden)
    why << "hidden " << p.hidden << " (a multiple of 256 up to " << kMaxHidden << "); ";
  if (p.block_size != 64) why << "block_size " << p.block_size << " (64); ";
  if (p.max_context < 1) why << "max_context " << p.max_context << "; ";
  if (!p.x16 || !p.wq || !p.wkva || !p.kva_norm_w || !p.w_uk_t || !p.kv_b || !p.wo || !p.position || !p.cos || !p.sin ||
      !p.cache || !p.slot || !p.block_table || !p.context_len || !p.q32 || !p.kva32 || !p.qlat16 || !p.workspace ||
      !p.o16 || !p.out || !p.sync)
    why << "null pointer; ";
  const auto misaligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
  if (misaligned(p.x16) || misaligned(p.wq) || misaligned(p.wkva) || misaligned(p.w_uk_t) || misaligned(p.kv_b) ||
      misaligned(p.wo) || misaligned(p.cache) || misaligned(p.workspace) || misaligned(p.o16) || misaligned(p.qlat16))
    why << "operands must be 16-byte aligned; ";
  if (CurrentDeviceProps().sms < 2) why << "needs >= 2 SMs (block 0 normalises while the others absorb); ";
  if (why.str().empty() && !FitsCurrentDevice()) why << "no cooperative launch, or one block does not fit an SM; ";
  return why.str();
}

void MlaAttnPersistent(const MlaAttnPersistentParams& p) {
  const std::string why = MlaAttnPersistentUnsupported(p);
  DS_CHECK(why.empty()) << "MlaAttnPersistent: " << why;
  LaunchCooperative(MlaAttnPersistentKernel, dim3(static_cast<unsigned>(CurrentDeviceProps().sms)), dim3(kThreads),
                    DynSmem(), p.stream, p);
}

}  // namespace ds::cuda
