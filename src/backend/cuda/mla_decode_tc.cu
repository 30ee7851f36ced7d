// Tensor-core MLA decode (absorbed form over the paged bf16 latent cache), see mla_decode.h
// and docs/design/cuda_backend.md ("MLA decode on tensor cores"). Two kernels, chosen by TcPlan:
// the warp-split kernel (MlaDecodeWsKernel, below) for <= 16 query rows per sequence, and the
// row-tile kernel (MlaDecodeTcKernel) for the rest:
//
// Row-tile kernel: one block = one sequence x one tile of RT*16 query rows (row = query token i * heads + head,
// so the heads of one request form the M dimension of the MMAs) x one KV chunk. 8 warps:
// warp w owns row tile w / WV (WV = 8 / RT warps per row tile) and, inside it,
//   - a slice of the 36 k16-steps of S = Q K^T (partial scores summed through shared memory,
//     so no warp repeats another's QK work), and
//   - a slice of 512 / WV value columns of O = P V (P taken straight from the score
//     accumulators: the m16n8k16 C layout of two n8 tiles is the A layout of one k16 step).
// Keys stream through a 3-stage cp.async pipeline, 32 keys (half a 64-token page) per stage;
// keys past the chunk are zero-filled and masked, so NaN garbage in unused cache rows never
// reaches the output. Online softmax in base 2 with fp32 state. The chunk size is one for the
// whole batch (split-KV by work: the total key rows to stream over ~2 blocks per SM, never
// below kv_chunk), and the combine kernel merges the splits with their log-sum-exp.
#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/device_props.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mla_decode.h"
#include "backend/cuda/mla_decode_merge.cuh"
#include "backend/cuda/mla_decode_uv.h"

namespace ds::cuda {
namespace {

constexpr int kD = 576, kV = 512;  // key (latent + rope) and value (latent) dims
constexpr int kBN = 32;            // keys per pipeline stage
// Pipeline depth: 3 stages (default, verified on the H200 in run 1) or 2 (tc_stages = 2; then
// a 16-row tile's block needs 109 KB and two blocks fit on one SM).
constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kLd = kD + 8;  // padded shared-memory row (bf16): 1168 B, conflict-free ldmatrix
constexpr int kChunksPerRow = kD / 8;  // 16-byte pieces per cache row
constexpr int kKSteps = kD / 16;       // k16 steps of Q K^T

template <int RT, int kStages, int MT>
constexpr size_t SmemBytes() {
  return static_cast<size_t>(RT * 16 + kStages * kBN) * kLd * 2 + static_cast<size_t>(kWarps) * MT * 16 * kBN * 4;
}

__device__ __forceinline__ uint32_t SmemAddr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0 source bytes: the 16 destination bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
using ptx::Ldsm4;
using ptx::Ldsm4T;
// c[16x8] += a[16x16] (row) * b[16x8] (col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

// MT = 16-row M tiles per warp (1, or 2 with tc_rows_per_warp = 32: each key/value fragment
// read from shared memory then feeds two MMAs). A row group = MT tiles = 16 * MT rows.
// kFastIo (tc_fast_io): the Q tile is read with 16-byte loads, all of a thread's loads in flight
// at once, after the first K stages are issued (so the two overlap); and the combine keeps 8
// splits' loads in flight. Off: the configuration verified in run 1.
template <int RT, int kStages, int kMinBlocks, int MT, bool kFastIo>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    MlaDecodeTcKernel(MlaDecodeParams p, int nrb, int chunk, int max_splits) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  static_assert(RT % MT == 0, "row tiles per block must be a multiple of tiles per warp");
  constexpr int WV = kWarps * MT / RT;  // warps per row group
  constexpr int VW = kV / WV;           // value columns per warp
  constexpr int NT = VW / 8;            // n8 tiles of O per warp
  constexpr int SN = kBN / 8;           // n8 tiles of S per stage
  constexpr int SPW = MT * SN * 4 * 32; // partial-score floats per warp
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [RT*16][kLd]
  __nv_bfloat16* Ks = Qs + RT * 16 * kLd;                             // [kStages][kBN][kLd]
  float* Sp = reinterpret_cast<float*>(Ks + kStages * kBN * kLd);     // [kWarps][MT][SN*4][32]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int rt = warp / WV, wv = warp % WV;  // row group, slice inside it
  const int s = blockIdx.x / nrb, rb = blockIdx.x % nrb;
  const int split = blockIdx.y;
  const int H = static_cast<int>(p.heads);
  const int q0 = p.query_start[s], q_len = p.query_start[s + 1] - q0;
  const int ctx = p.context_lens[s];
  const int valid_rows = q_len * H;
  const int row0 = rb * RT * 16;
  if (row0 >= valid_rows) return;  // rows that do not exist (shorter query block): no outputs
  const int kbeg = split * chunk;
  const int kend = min(ctx, kbeg + chunk);
  const int64_t lse_base = p.num_tokens * p.heads * max_splits * kV;
  if (kbeg >= kend) {  // an empty split: the combine skips it
    for (int r = threadIdx.x; r < RT * 16; r += kThreads) {
      const int row = row0 + r;
      if (row < valid_rows) {
        const int t = q0 + row / H, h = row % H;
        p.workspace[lse_base + (static_cast<int64_t>(t) * H + h) * max_splits + split] = -INFINITY;
      }
    }
    return;
  }

  // Q tile -> bf16 shared memory (rows past the query block are zeros).
  if constexpr (!kFastIo)
  for (int idx = threadIdx.x; idx < RT * 16 * (kD / 2); idx += kThreads) {
    const int r = idx / (kD / 2), c = (idx % (kD / 2)) * 2;
    const int row = row0 + r;
    float2 v = make_float2(0.f, 0.f);
    if (row < valid_rows) {
      const float* qp = p.q + static_cast<int64_t>(q0 + row / H) * p.q_tok_stride +
                        static_cast<int64_t>(row % H) * p.q_head_stride + c;
      v = make_float2(qp[0], qp[1]);
    }
    *reinterpret_cast<__nv_bfloat162*>(Qs + r * kLd + c) = __floats2bfloat162_rn(v.x, v.y);
  }

  const int32_t* bt = p.block_table + static_cast<int64_t>(s) * p.max_blocks;
  const int bs = static_cast<int>(p.block_size);
  const int ntiles = (kend - kbeg + kBN - 1) / kBN;
  auto load_tile = [&](int it, int stage) {
    const int k0 = kbeg + it * kBN;  // a multiple of 32: the stage lies inside one page
    __nv_bfloat16* dst = Ks + stage * kBN * kLd;
    const int64_t page = bt[k0 / bs];
    const __nv_bfloat16* src_base = p.cache + (page * bs + k0 % bs) * kD;
    for (int c = threadIdx.x; c < kBN * kChunksPerRow; c += kThreads) {
      const int j = c / kChunksPerRow, e = c % kChunksPerRow;
      const bool ok = k0 + j < kend;
      const __nv_bfloat16* src = ok ? src_base + static_cast<int64_t>(j) * kD + e * 8 : p.cache;
      CpAsync16(SmemAddr(dst + j * kLd + e * 8), src, ok);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
  float m_run[MT][2], l_run[MT][2];
  int limit[MT][2];  // keys < limit are visible to rows g and g + 8 of each of this warp's tiles (causal MTP)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = row0 + (rt * MT + mt) * 16 + g + hr * 8;
      limit[mt][hr] = row < valid_rows ? min(kend, ctx - (q_len - 1 - row / H)) : -1;
      m_run[mt][hr] = -INFINITY;
      l_run[mt][hr] = 0.f;
    }
  const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scores in base 2
  const int ks_beg = wv * kKSteps / WV, ks_end = (wv + 1) * kKSteps / WV;

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < ntiles) load_tile(st, st);
    CpAsyncCommit();
  }
  if constexpr (kFastIo) {  // Q tile, overlapping the K stages just issued (visible after the loop-top barrier)
    constexpr int kVec = kD / 4;                   // float4 per row
    constexpr int kPer = RT * 16 * kVec / kThreads;  // exact: 16 * 144 = 9 * 256
    static_assert(RT * 16 * kVec % kThreads == 0, "Q tile split");
    float4 v[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int r = idx / kVec, c = (idx % kVec) * 4;
      const int row = row0 + r;
      v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row < valid_rows)
        v[i] = __ldg(reinterpret_cast<const float4*>(p.q + static_cast<int64_t>(q0 + row / H) * p.q_tok_stride +
                                                     static_cast<int64_t>(row % H) * p.q_head_stride + c));
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int r = idx / kVec, c = (idx % kVec) * 4;
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v[i].x, v[i].y), hi = __floats2bfloat162_rn(v[i].z, v[i].w);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(Qs + r * kLd + c) = packed;
    }
  }

  for (int it = 0; it < ntiles; ++it) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage `it` (and the Q tile) visible; stage it-1 free for reuse
    {
      const int nx = it + kStages - 1;
      if (nx < ntiles) load_tile(nx, nx % kStages);
      CpAsyncCommit();
    }
    const __nv_bfloat16* Kt = Ks + (it % kStages) * kBN * kLd;

    // Partial scores over this warp's k-steps.
    float sc[MT][SN][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < SN; ++j) sc[mt][j][0] = sc[mt][j][1] = sc[mt][j][2] = sc[mt][j][3] = 0.f;
    for (int ks = ks_beg; ks < ks_end; ++ks) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        Ldsm4(SmemAddr(Qs + ((rt * MT + mt) * 16 + (lane & 15)) * kLd + ks * 16 + (lane >> 4) * 8), a[mt][0], a[mt][1],
              a[mt][2], a[mt][3]);
#pragma unroll
      for (int nb = 0; nb < SN / 2; ++nb) {
        const int m = lane >> 3;
        uint32_t b0, b1, b2, b3;
        Ldsm4(SmemAddr(Kt + (nb * 16 + (m >> 1) * 8 + (lane & 7)) * kLd + ks * 16 + (m & 1) * 8), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma(sc[mt][2 * nb], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b0, b1);
          Mma(sc[mt][2 * nb + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b2, b3);
        }
      }
    }
    // Sum the WV partial scores of this row group (same order in every warp: identical S).
    {
      float* my = Sp + warp * SPW;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < SN; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) my[((mt * SN + j) * 4 + c) * 32 + lane] = sc[mt][j][c];
      __syncthreads();
      const float* base = Sp + rt * WV * SPW;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < SN; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            float v = 0.f;
#pragma unroll
            for (int w2 = 0; w2 < WV; ++w2) v += base[w2 * SPW + ((mt * SN + j) * 4 + c) * 32 + lane];
            sc[mt][j][c] = v;
          }
    }
    // Online softmax (rows g and g + 8 of each tile; each row's 32 scores live in one quad).
    const int kt0 = kbeg + it * kBN;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < SN; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int hr = c >> 1;
          const int key = kt0 + j * 8 + 2 * tq + (c & 1);
          const float v = key < limit[mt][hr] ? sc[mt][j][c] * sl2 : -INFINITY;
          sc[mt][j][c] = v;
          mx[hr] = fmaxf(mx[hr], v);
        }
      float muse[2], alpha[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
        const float m_new = fmaxf(m_run[mt][hr], mx[hr]);
        muse[hr] = m_new == -INFINITY ? 0.f : m_new;
        alpha[hr] = exp2f(m_run[mt][hr] - muse[hr]);
        m_run[mt][hr] = m_new;
      }
      float lsum[2] = {0.f, 0.f};
#pragma unroll
      for (int j = 0; j < SN; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float pv = exp2f(sc[mt][j][c] - muse[c >> 1]);
          sc[mt][j][c] = pv;
          lsum[c >> 1] += pv;
        }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) l_run[mt][hr] = l_run[mt][hr] * alpha[hr] + lsum[hr];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        acc[mt][n][0] *= alpha[0]; acc[mt][n][1] *= alpha[0];
        acc[mt][n][2] *= alpha[1]; acc[mt][n][3] *= alpha[1];
      }
    }
    // O += P V over this warp's value columns.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = PackBf16(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
        a[mt][1] = PackBf16(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
        a[mt][2] = PackBf16(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
        a[mt][3] = PackBf16(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int nb = 0; nb < NT / 2; ++nb) {
        const int m = lane >> 3;
        const int col = wv * VW + nb * 16 + (m >> 1) * 8;
        const int key = kk * 16 + (m & 1) * 8 + (lane & 7);
        uint32_t b0, b1, b2, b3;
        Ldsm4T(SmemAddr(Kt + key * kLd + col), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma(acc[mt][2 * nb], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b0, b1);
          Mma(acc[mt][2 * nb + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b2, b3);
        }
      }
    }
  }
  CpAsyncWait<0>();

  // Normalised partial output and its log-sum-exp (natural log) per row.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      l_run[mt][hr] += __shfl_xor_sync(0xffffffffu, l_run[mt][hr], 1);
      l_run[mt][hr] += __shfl_xor_sync(0xffffffffu, l_run[mt][hr], 2);
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = row0 + (rt * MT + mt) * 16 + g + hr * 8;
      if (row >= valid_rows) continue;
      const int t = q0 + row / H, h = row % H;
      const int64_t part = (static_cast<int64_t>(t) * H + h) * max_splits + split;
      float* po = p.workspace + part * kV + wv * VW;
      const bool empty = !(l_run[mt][hr] > 0.f);
      const float inv = empty ? 0.f : 1.f / l_run[mt][hr];
#pragma unroll
      for (int n = 0; n < NT; ++n)
        *reinterpret_cast<float2*>(po + n * 8 + 2 * tq) =
            make_float2(acc[mt][n][2 * hr] * inv, acc[mt][n][2 * hr + 1] * inv);
      if (wv == 0 && tq == 0)
        p.workspace[lse_base + part] =
            empty ? -INFINITY : (m_run[mt][hr] + log2f(l_run[mt][hr])) * 0.6931471805599453f;
    }
}

// out[t, h, :] = sum_s exp(lse_s - lse) * o_s (empty splits, lse = -inf, are skipped).
template <typename TOut>
__global__ void __launch_bounds__(kV / 4) MlaDecodeTcCombine(MlaDecodeParams p, int max_splits) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int t = blockIdx.x, h = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(t) * p.heads + h) * max_splits;
  const float* lse = p.workspace + p.num_tokens * p.heads * max_splits * kV + base;
  float gmax = -INFINITY;
  for (int s = 0; s < max_splits; ++s) gmax = fmaxf(gmax, lse[s]);
  const int d = threadIdx.x * 4;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float wsum = 0.f;
  for (int s = 0; s < max_splits; ++s) {
    const float l = lse[s];
    if (l == -INFINITY) continue;
    const float w = expf(l - gmax);
    wsum += w;
    const float4 v = *reinterpret_cast<const float4*>(p.workspace + (base + s) * kV + d);
    acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(t) * p.o_tok_stride + h * p.o_head_stride + d;
  out[0] = dev::FromF<TOut>(acc.x * inv);
  out[1] = dev::FromF<TOut>(acc.y * inv);
  out[2] = dev::FromF<TOut>(acc.z * inv);
  out[3] = dev::FromF<TOut>(acc.w * inv);
}

// Same result as MlaDecodeTcCombine, with 8 splits' loads in flight per thread (MergeSplits,
// mla_decode_merge.cuh).
template <typename TOut>
__global__ void __launch_bounds__(kV / 4) MlaDecodeTcCombineFast(MlaDecodeParams p, int max_splits) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int t = blockIdx.x, h = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(t) * p.heads + h) * max_splits;
  const float* lse = p.workspace + p.num_tokens * p.heads * max_splits * kV + base;
  const int d = threadIdx.x * 4;
  float4 acc;
  float wsum;
  mla::MergeSplits(p.workspace, lse, base, max_splits, kV, d, &acc, &wsum);
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(t) * p.o_tok_stride + h * p.o_head_stride + d;
  out[0] = dev::FromF<TOut>(acc.x * inv);
  out[1] = dev::FromF<TOut>(acc.y * inv);
  out[2] = dev::FromF<TOut>(acc.z * inv);
  out[3] = dev::FromF<TOut>(acc.w * inv);
}

// ---------------------------------------------------------------------------------------------
// Warp-split kernel for <= 16 query rows per sequence (16 heads x 1 token: TP8; memory-bound).
// One block = one sequence x one KV chunk; kWsPairs warp pairs, each owning a contiguous
// sub-chunk of chunk / kWsPairs keys (split-KV inside the block). Both warps of a pair compute
// the same 16 x 16 scores per stage (QK^T is cheap here; no partial-score exchange, no block
// barrier per stage) and each keeps half the 512 value columns (128 fp32 accumulators). A pair
// streams its keys through its own kWsStages-deep cp.async ring of 16-key stages, synchronised
// by a 64-thread named barrier; 2 blocks per SM keep 4 pairs' loads (>= 75 KB) in flight. The
// pairs' partial results are merged once through shared memory at the end (log-sum-exp), and
// written either as the block's split partial or, when the whole batch has one split, straight
// to the output. Numerics: as the row-tile kernel, with the online softmax of each pair over
// 16-key tiles (MlaDecodeTcChunk reports sub-chunk and tile, which the emulation follows).
// Configurations (template <pairs, stages, blocks per SM>): <2, 2, 2> the default; <3, 3, 1>
// (tc_stages = 3: 6 warps, 3-deep rings, two stages in flight per pair while it computes).
constexpr int kWsBN = 16;
constexpr int kWsVW = kV / 2, kWsNT = kWsVW / 8;  // value columns per warp, n8 tiles
constexpr int kWsRedLd = kV + 8;                  // fp32 row of the merge buffer (padded)
template <int NP, int ST>
constexpr size_t WsSmem() {
  return static_cast<size_t>(16 + NP * ST * kWsBN) * kLd * 2;
}
static_assert(2 * 16 * kWsRedLd * 4 + (2 * 2 + 1) * 16 * 4 <= WsSmem<2, 2>(), "merge buffer fits in the stage ring");
static_assert(3 * 16 * kWsRedLd * 4 + (3 * 2 + 1) * 16 * 4 <= WsSmem<3, 3>(), "merge buffer fits in the stage ring");

// The fused combine of one sequence (kFused below), run by the block that arrived last: out[t,
// h, :] = sum_s exp(lse_s - max) * o_s / sum_s exp(lse_s - max) over the sequence's nsplit
// splits, the arithmetic of MlaDecodeTcCombineFast in its order (weights and their sum in split
// order; each output element accumulates its splits in split order with the same fused
// multiply-adds; splits past nsplit, empty for this sequence, add exact zeros there), so the
// result equals the combine kernel's. wsm: shared memory for 16 x nsplit weights + 16 inverses.
// Each thread keeps all its float4 outputs (ceil(16 * 128 / threads)) in registers and, per
// split, has all their loads in flight (one L2 round trip per split).
template <typename TOut, int kThreadsM>
__device__ __forceinline__ void FusedMerge(const MlaDecodeParams& p, float* wsm, int q0, int valid_rows, int nsplit,
                                           int max_splits) {
  const int H = static_cast<int>(p.heads);
  const int64_t lse_base = p.num_tokens * p.heads * max_splits * kV;
  float* winv = wsm + 16 * nsplit;
  for (int idx = threadIdx.x; idx < valid_rows * nsplit; idx += kThreadsM) {
    const int r = idx / nsplit, sp = idx % nsplit;
    wsm[idx] = __ldcg(p.workspace + lse_base + (static_cast<int64_t>(q0 + r / H) * H + r % H) * max_splits + sp);
  }
  __syncthreads();
  if (threadIdx.x < valid_rows) {
    float* wr = wsm + threadIdx.x * nsplit;
    float gmax = -INFINITY;
    for (int sp = 0; sp < nsplit; ++sp) gmax = fmaxf(gmax, wr[sp]);
    float wsum = 0.f;
    for (int sp = 0; sp < nsplit; ++sp) {
      const float l = wr[sp];
      const float w = l == -INFINITY ? 0.f : expf(l - gmax);
      wr[sp] = w;
      wsum += w;
    }
    winv[threadIdx.x] = wsum > 0.f ? 1.f / wsum : 0.f;
  }
  __syncthreads();
  constexpr int kCols = kV / 4;                                   // float4 per row
  constexpr int kItems = (16 * kCols + kThreadsM - 1) / kThreadsM;  // float4 outputs per thread
  float4 acc[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int sp = 0; sp < nsplit; ++sp) {
    float w[kItems];
    float4 v[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int idx = threadIdx.x + i * kThreadsM;
      const int r = idx / kCols, c = (idx % kCols) * 4;
      w[i] = 0.f;
      v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (idx < 16 * kCols && r < valid_rows) {
        w[i] = wsm[r * nsplit + sp];
        if (w[i] > 0.f)  // an empty (row, split) was written as zeros with LSE -inf: not read, as in the combine
          v[i] = __ldcg(reinterpret_cast<const float4*>(
              p.workspace + ((static_cast<int64_t>(q0 + r / H) * H + r % H) * max_splits + sp) * kV + c));
      }
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      acc[i].x += w[i] * v[i].x; acc[i].y += w[i] * v[i].y; acc[i].z += w[i] * v[i].z; acc[i].w += w[i] * v[i].w;
    }
  }
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = threadIdx.x + i * kThreadsM;
    const int r = idx / kCols, c = (idx % kCols) * 4;
    if (idx >= 16 * kCols || r >= valid_rows) continue;
    const float inv = winv[r];
    TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(q0 + r / H) * p.o_tok_stride + (r % H) * p.o_head_stride + c;
    out[0] = dev::FromF<TOut>(acc[i].x * inv);
    out[1] = dev::FromF<TOut>(acc[i].y * inv);
    out[2] = dev::FromF<TOut>(acc[i].z * inv);
    out[3] = dev::FromF<TOut>(acc[i].w * inv);
  }
}

__device__ __forceinline__ void PairBarrier(int pair) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(pair + 1), "n"(64) : "memory");
}

// kCluster (tc_cluster_merge, opt-in, not yet measured): the max_splits blocks of a sequence
// form one thread-block cluster and merge their results through distributed shared memory, each
// block writing a slice of the output (no partials in global memory, no combine launch).
// kFused (tc_fused_combine, opt-in, not yet verified on the GPU): every block of a sequence with
// more than one non-empty split writes its partial and LSE as for the combine, then arrives at
// the sequence's counter (p.split_counters[s]); the last to arrive merges all the sequence's
// splits (FusedMerge: the combine kernel's arithmetic in its split order) and writes the output,
// then leaves the counter at 0 for the next launch. A sequence with one split writes directly.
template <typename TOut, int kWsPairs, int kWsStages, int kMinBlocks, bool kCluster, bool kFused = false>
__global__ void __launch_bounds__(kWsPairs * 64, kMinBlocks)
    MlaDecodeWsKernel(MlaDecodeParams p, int chunk, int max_splits, bool direct) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  constexpr int kWsThreads = kWsPairs * 64;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [16][kLd]
  __nv_bfloat16* Ks = Qs + 16 * kLd;                                  // [pairs][stages][kWsBN][kLd]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int pair = warp >> 1, half = warp & 1;
  const int ptid = threadIdx.x & 63;  // thread index inside the pair
  const int s = blockIdx.x, split = blockIdx.y;
  const int H = static_cast<int>(p.heads);
  const int q0 = p.query_start[s], q_len = p.query_start[s + 1] - q0;
  const int ctx = p.context_lens[s];
  const int valid_rows = q_len * H;  // <= 16 (host plan)
  const int kbeg = split * chunk;
  const int kend = min(ctx, kbeg + chunk);
  const int64_t lse_base = p.num_tokens * p.heads * max_splits * kV;
  if (!kCluster && kbeg >= kend) {  // an empty split: the combine skips it (direct: an empty context, output 0)
    // kFused: an empty split arrives nowhere (the merge reads splits < nsplit only); split 0 is
    // empty only for an empty context, whose output is 0.
    if (direct || (kFused && split == 0)) {
      for (int idx = threadIdx.x; idx < valid_rows * kV; idx += kWsThreads) {
        const int r = idx / kV, c = idx % kV;
        static_cast<TOut*>(p.out)[static_cast<int64_t>(q0 + r / H) * p.o_tok_stride + (r % H) * p.o_head_stride + c] =
            dev::FromF<TOut>(0.f);
      }
    } else if (!kFused && threadIdx.x < valid_rows) {
      const int t = q0 + threadIdx.x / H, h = threadIdx.x % H;
      p.workspace[lse_base + (static_cast<int64_t>(t) * H + h) * max_splits + split] = -INFINITY;
    }
    return;
  }
  // kFused: the sequence's non-empty splits (the blocks that arrive at its counter); with one,
  // the block writes the output directly, as `direct` does for the whole batch.
  const int nsplit = kFused ? (ctx + chunk - 1) / chunk : 0;
  const bool dir = kFused ? (direct || nsplit == 1) : direct;
  const int sub = chunk / kWsPairs;
  const int pbeg = kbeg + pair * sub, pend = min(kend, pbeg + sub);
  const int ntiles = pend > pbeg ? (pend - pbeg + kWsBN - 1) / kWsBN : 0;
  const int32_t* bt = p.block_table + static_cast<int64_t>(s) * p.max_blocks;
  const int bs = static_cast<int>(p.block_size);
  __nv_bfloat16* ring = Ks + pair * kWsStages * kWsBN * kLd;
  auto load_tile = [&](int it, int stage) {
    const int k0 = pbeg + it * kWsBN;  // a multiple of 16: the stage lies inside one page
    __nv_bfloat16* dst = ring + stage * kWsBN * kLd;
    const int64_t page = bt[k0 / bs];
    const __nv_bfloat16* src_base = p.cache + (page * bs + k0 % bs) * kD;
#pragma unroll
    for (int i = 0; i < kWsBN * kChunksPerRow / 64; ++i) {
      const int c = ptid + i * 64;
      const int j = c / kChunksPerRow, e = c % kChunksPerRow;
      const bool ok = k0 + j < pend;
      const __nv_bfloat16* src = ok ? src_base + static_cast<int64_t>(j) * kD + e * 8 : p.cache;
      CpAsync16(SmemAddr(dst + j * kLd + e * 8), src, ok);
    }
  };
#pragma unroll
  for (int st = 0; st < kWsStages - 1; ++st) {
    if (st < ntiles) load_tile(st, st);
    CpAsyncCommit();
  }
  // Q tile (16 rows, fp32 -> bf16; rows past the query block are zeros), overlapping the first stages.
  {
    constexpr int kVec = kD / 4, kPer = 16 * kVec / kWsThreads;
    static_assert(16 * kVec % kWsThreads == 0, "Q tile split");
    const bool vec = (reinterpret_cast<uintptr_t>(p.q) % 16 == 0) && p.q_tok_stride % 4 == 0 && p.q_head_stride % 4 == 0;
    float4 v[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = threadIdx.x + i * kWsThreads;
      const int r = idx / kVec, c = (idx % kVec) * 4;
      v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < valid_rows) {
        const float* qp = p.q + static_cast<int64_t>(q0 + r / H) * p.q_tok_stride + static_cast<int64_t>(r % H) * p.q_head_stride + c;
        if (vec) v[i] = __ldg(reinterpret_cast<const float4*>(qp));
        else v[i] = make_float4(qp[0], qp[1], qp[2], qp[3]);
      }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = threadIdx.x + i * kWsThreads;
      const int r = idx / kVec, c = (idx % kVec) * 4;
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v[i].x, v[i].y), hi = __floats2bfloat162_rn(v[i].z, v[i].w);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(Qs + r * kLd + c) = packed;
    }
  }
  __syncthreads();  // Q visible to every warp

  float acc[kWsNT][4];
#pragma unroll
  for (int n = 0; n < kWsNT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m_run[2], l_run[2];
  int limit[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = g + hr * 8;
    limit[hr] = row < valid_rows ? min(pend, ctx - (q_len - 1 - row / H)) : -1;
    m_run[hr] = -INFINITY;
    l_run[hr] = 0.f;
  }
  const float sl2 = p.softmax_scale * 1.4426950408889634f;
  const uint32_t q_addr = SmemAddr(Qs + (lane & 15) * kLd + (lane >> 4) * 8);
  const int mi = lane >> 3;
  const int k_off = ((mi >> 1) * 8 + (lane & 7)) * kLd + (mi & 1) * 8;        // QK B fragment
  const int v_off = ((mi & 1) * 8 + (lane & 7)) * kLd + half * kWsVW + (mi >> 1) * 8;  // PV B fragment

  for (int it = 0; it < ntiles; ++it) {
    CpAsyncWait<kWsStages - 2>();
    PairBarrier(pair);  // stage `it` visible to both warps of the pair; stage it-1 consumed
    {
      const int nx = it + kWsStages - 1;
      if (nx < ntiles) load_tile(nx, nx % kWsStages);
      CpAsyncCommit();
    }
    const __nv_bfloat16* Kt = ring + (it % kWsStages) * kWsBN * kLd;
    const uint32_t k_addr = SmemAddr(Kt + k_off);
    // S = Q K^T over all 36 k-steps (two accumulator sets for ILP, summed at the end).
    float sc[2][4], sc2[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) sc[j][c] = sc2[j][c] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ks += 2) {
      uint32_t a0, a1, a2, a3, b0, b1, b2, b3;
      Ldsm4(q_addr + ks * 32, a0, a1, a2, a3);
      Ldsm4(k_addr + ks * 32, b0, b1, b2, b3);
      Mma(sc[0], a0, a1, a2, a3, b0, b1);
      Mma(sc[1], a0, a1, a2, a3, b2, b3);
      Ldsm4(q_addr + (ks + 1) * 32, a0, a1, a2, a3);
      Ldsm4(k_addr + (ks + 1) * 32, b0, b1, b2, b3);
      Mma(sc2[0], a0, a1, a2, a3, b0, b1);
      Mma(sc2[1], a0, a1, a2, a3, b2, b3);
    }
    // Online softmax in base 2 (rows g and g + 8; each row's 16 scores live in one quad).
    const int kt0 = pbeg + it * kWsBN;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int hr = c >> 1;
        const int key = kt0 + j * 8 + 2 * tq + (c & 1);
        const float v = key < limit[hr] ? (sc[j][c] + sc2[j][c]) * sl2 : -INFINITY;
        sc[j][c] = v;
        mx[hr] = fmaxf(mx[hr], v);
      }
    float muse[2], alpha[2];
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
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float pv = exp2f(sc[j][c] - muse[c >> 1]);
        sc[j][c] = pv;
        lsum[c >> 1] += pv;
      }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) l_run[hr] = l_run[hr] * alpha[hr] + lsum[hr];
    // O = O * alpha + P V over this warp's half of the value columns (P: bf16, the C layout of
    // the two n8 score tiles is the A layout of one k16 step).
    const uint32_t a0 = PackBf16(sc[0][0], sc[0][1]), a1 = PackBf16(sc[0][2], sc[0][3]);
    const uint32_t a2 = PackBf16(sc[1][0], sc[1][1]), a3 = PackBf16(sc[1][2], sc[1][3]);
    const uint32_t v_addr = SmemAddr(Kt + v_off);
#pragma unroll
    for (int nb = 0; nb < kWsNT / 2; ++nb) {
      uint32_t b0, b1, b2, b3;
      Ldsm4T(v_addr + nb * 32, b0, b1, b2, b3);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        acc[2 * nb][c] *= alpha[c >> 1];
        acc[2 * nb + 1][c] *= alpha[c >> 1];
      }
      Mma(acc[2 * nb], a0, a1, a2, a3, b0, b1);
      Mma(acc[2 * nb + 1], a0, a1, a2, a3, b2, b3);
    }
  }
  CpAsyncWait<0>();
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
  }
  __syncthreads();  // every pair done with its ring: the shared memory becomes the merge buffer
  float* red = reinterpret_cast<float*>(smem_raw);      // [pairs][16][kWsRedLd] scaled partial O
  float* ml = red + kWsPairs * 16 * kWsRedLd;           // [pairs][2][16]: m, l per row
  if (half == 0 && tq == 0) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      ml[(pair * 2 + 0) * 16 + g + hr * 8] = m_run[hr];
      ml[(pair * 2 + 1) * 16 + g + hr * 8] = l_run[hr];
    }
  }
  __syncthreads();
  auto row_stats = [&](int row, float* M, float* L) {
    float mm = -INFINITY;
#pragma unroll
    for (int q = 0; q < kWsPairs; ++q) mm = fmaxf(mm, ml[(q * 2) * 16 + row]);
    float ll = 0.f;
    if (mm != -INFINITY) {
#pragma unroll
      for (int q = 0; q < kWsPairs; ++q) ll += ml[(q * 2 + 1) * 16 + row] * exp2f(ml[(q * 2) * 16 + row] - mm);
    }
    *M = mm;
    *L = ll;
  };
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = g + hr * 8;
    float M, L;
    row_stats(row, &M, &L);
    const float scale = L > 0.f ? exp2f(m_run[hr] - M) / L : 0.f;  // m_run = -inf (no keys): 0
    float* dst = red + (pair * 16 + row) * kWsRedLd + half * kWsVW + 2 * tq;
#pragma unroll
    for (int n = 0; n < kWsNT; ++n)
      *reinterpret_cast<float2*>(dst + n * 8) = make_float2(acc[n][2 * hr] * scale, acc[n][2 * hr + 1] * scale);
  }
  float* lseb = ml + kWsPairs * 2 * 16;  // kCluster: [16] the block's LSE per row (base 2)
  if (kCluster && threadIdx.x < 16) {
    float M, L;
    row_stats(threadIdx.x, &M, &L);
    lseb[threadIdx.x] = L > 0.f ? M + log2f(L) : -INFINITY;
  }
  if (!kCluster && !dir && threadIdx.x < valid_rows) {
    float M, L;
    row_stats(threadIdx.x, &M, &L);
    const int t = q0 + threadIdx.x / H, h = threadIdx.x % H;
    p.workspace[lse_base + (static_cast<int64_t>(t) * H + h) * max_splits + split] =
        L > 0.f ? (M + log2f(L)) * 0.6931471805599453f : -INFINITY;
  }
  __syncthreads();
  if constexpr (kCluster) {
    // The block's normalised output, summed over its pairs in place (pair 0's rows).
    for (int idx = threadIdx.x; idx < 16 * (kV / 4); idx += kWsThreads) {
      const int r = idx / (kV / 4), c = (idx % (kV / 4)) * 4;
      float4 o = *reinterpret_cast<const float4*>(red + r * kWsRedLd + c);
#pragma unroll
      for (int q = 1; q < kWsPairs; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(red + (q * 16 + r) * kWsRedLd + c);
        o.x += v.x; o.y += v.y; o.z += v.z; o.w += v.w;
      }
      *reinterpret_cast<float4*>(red + r * kWsRedLd + c) = o;
    }
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's output and LSE visible to the cluster
    const int nb = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
    for (int idx = rank * kWsThreads + threadIdx.x; idx < 16 * (kV / 4); idx += nb * kWsThreads) {
      const int r = idx / (kV / 4), c = (idx % (kV / 4)) * 4;
      if (r >= valid_rows) continue;
      float gmax = -INFINITY;
      for (int b = 0; b < nb; ++b) gmax = fmaxf(gmax, cluster.map_shared_rank(lseb, b)[r]);
      float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
      float wsum = 0.f;
      for (int b = 0; b < nb; ++b) {
        const float l = cluster.map_shared_rank(lseb, b)[r];
        if (l == -INFINITY) continue;
        const float w = exp2f(l - gmax);
        wsum += w;
        const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red, b) + r * kWsRedLd + c);
        o.x += w * v.x; o.y += w * v.y; o.z += w * v.z; o.w += w * v.w;
      }
      const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
      const int t = q0 + r / H, h = r % H;
      TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(t) * p.o_tok_stride + h * p.o_head_stride + c;
      out[0] = dev::FromF<TOut>(o.x * inv);
      out[1] = dev::FromF<TOut>(o.y * inv);
      out[2] = dev::FromF<TOut>(o.z * inv);
      out[3] = dev::FromF<TOut>(o.w * inv);
    }
    cluster.sync();  // peers may still read this block's shared memory
  } else {
  // Sum the pairs' scaled partials: 16 rows x 128 float4, coalesced writes.
  for (int idx = threadIdx.x; idx < 16 * (kV / 4); idx += kWsThreads) {
    const int r = idx / (kV / 4), c = (idx % (kV / 4)) * 4;
    if (r >= valid_rows) continue;
    float4 o = *reinterpret_cast<const float4*>(red + r * kWsRedLd + c);
#pragma unroll
    for (int q = 1; q < kWsPairs; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(red + (q * 16 + r) * kWsRedLd + c);
      o.x += v.x; o.y += v.y; o.z += v.z; o.w += v.w;
    }
    const int t = q0 + r / H, h = r % H;
    if (dir) {
      TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(t) * p.o_tok_stride + h * p.o_head_stride + c;
      out[0] = dev::FromF<TOut>(o.x);
      out[1] = dev::FromF<TOut>(o.y);
      out[2] = dev::FromF<TOut>(o.z);
      out[3] = dev::FromF<TOut>(o.w);
    } else {
      *reinterpret_cast<float4*>(p.workspace + ((static_cast<int64_t>(t) * H + h) * max_splits + split) * kV + c) = o;
    }
  }
  if constexpr (kFused) {
    if (dir) return;
    // Split-KV "last block merges" (the pattern of skinny_gemm.cu's split-K): release fence by
    // every thread after its partial / LSE stores, the block's arrival, and an acquire fence in
    // the last block before it reads the other blocks' stores (through L2: __ldcg).
    __shared__ int s_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned prev = atomicAdd(p.split_counters + s, 1u);
      s_last = prev == static_cast<unsigned>(nsplit - 1);
      if (s_last) p.split_counters[s] = 0u;  // every split has arrived: ready for the next launch / replay
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    FusedMerge<TOut, kWsThreads>(p, reinterpret_cast<float*>(smem_raw), q0, valid_rows, nsplit, max_splits);
  }
  }
}

int NumSms() { return CurrentDeviceProps().sms; }

template <int RT, int kStages, int kMinBlocks, int MT, bool kFastIo>
void LaunchTc(const MlaDecodeParams& p, int nrb, int chunk, int max_splits) {
  constexpr size_t smem = SmemBytes<RT, kStages, MT>();
  static_assert(smem * kMinBlocks <= 227 * 1024, "shared memory per SM");
  // Per device (device_props.h): a process-wide once-flag left GPUs other than the first at 48 KiB.
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaDecodeTcKernel<RT, kStages, kMinBlocks, MT, kFastIo>),
                       static_cast<int>(smem));
  dim3 grid(static_cast<unsigned>(p.num_seqs * nrb), static_cast<unsigned>(max_splits));
  LaunchKernel(MlaDecodeTcKernel<RT, kStages, kMinBlocks, MT, kFastIo>, grid, kThreads, smem, p.stream, p.pdl, p, nrb, chunk,
               max_splits);
  DS_CUDA_CHECK_LAUNCH("MlaDecodeTcKernel");
}

template <bool kFastIo>
void DispatchTc(const MlaDecodeParams& p, int rt, int n, int c, int ms) {
  if (p.tc_rows_per_warp == 32 && rt == 4) {
    if (p.tc_stages == 2) LaunchTc<4, 2, 1, 2, kFastIo>(p, n, c, ms);
    else LaunchTc<4, 3, 1, 2, kFastIo>(p, n, c, ms);
  } else if (p.tc_stages == 2) {
    if (rt == 1) LaunchTc<1, 2, 2, 1, kFastIo>(p, n, c, ms);
    else if (rt == 2) LaunchTc<2, 2, 1, 1, kFastIo>(p, n, c, ms);
    else LaunchTc<4, 2, 1, 1, kFastIo>(p, n, c, ms);
  } else {
    if (rt == 1) LaunchTc<1, 3, 1, 1, kFastIo>(p, n, c, ms);
    else if (rt == 2) LaunchTc<2, 3, 1, 1, kFastIo>(p, n, c, ms);
    else LaunchTc<4, 3, 1, 1, kFastIo>(p, n, c, ms);
  }
  if (p.uv_w != nullptr) {  // the W_UV epilogue in place of the combine
    MlaDecodeCombineUv(p, ms);
    return;
  }
  dim3 cgrid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.heads));
  if constexpr (kFastIo) {
    if (p.out_type == DTypeOut::kF32) LaunchKernel(MlaDecodeTcCombineFast<float>, cgrid, kV / 4, 0, p.stream, p.pdl, p, ms);
    else LaunchKernel(MlaDecodeTcCombineFast<__nv_bfloat16>, cgrid, kV / 4, 0, p.stream, p.pdl, p, ms);
  } else {
    if (p.out_type == DTypeOut::kF32) LaunchKernel(MlaDecodeTcCombine<float>, cgrid, kV / 4, 0, p.stream, p.pdl, p, ms);
    else LaunchKernel(MlaDecodeTcCombine<__nv_bfloat16>, cgrid, kV / 4, 0, p.stream, p.pdl, p, ms);
  }
  DS_CUDA_CHECK_LAUNCH("MlaDecodeTcCombine");
}

// The tensor-core path's plan: which kernel, its tiles and its split of the keys.
struct TcPlanInfo {
  bool ws = false;           // warp-split kernel (<= 16 rows per sequence) vs row-tile kernel
  int ws_pairs = 2;          // warp-split kernel: warp pairs per block (3: the 3-stage configuration)
  int rt = 1;                // row-tile kernel: 16-row tiles per block
  int64_t nrb = 1;           // row-tile kernel: row blocks per sequence
  int64_t chunk = 0;         // keys per block (split)
  int64_t max_splits = 1;
  int64_t softmax_chunk = 0; // keys of one independent online softmax (ws: chunk / kWsPairs)
  int tile = kBN;            // keys per online-softmax update (ws: kWsBN)
};

TcPlanInfo TcPlan(const MlaDecodeParams& p) {
  TcPlanInfo pl;
  const int64_t max_q = p.max_q_len > 0 ? p.max_q_len : p.num_tokens - p.num_seqs + 1;
  const int64_t rows = max_q * p.heads;
  const int64_t total = p.total_context > 0 ? p.total_context : p.num_seqs * p.max_context;
  const int64_t max_ctx = std::max<int64_t>(1, p.max_context);
  pl.ws = rows <= 16 && p.tc_kernel != 1;
  if (pl.ws) {
    // Split-KV by work: the keys per block minimising the estimated time, ceil(blocks / slots)
    // waves of (chunk + per-block cost) key-equivalents, 2 blocks per SM. The per-block cost
    // (~88 keys) is its partial output (16 rows x 2 KB written and read back) plus the
    // prologue. Blocks: exact for a uniform batch (total = S x max, as in a graph bucket),
    // else ceil(total / chunk) + S / 2 (each sequence's last split half full on average).
    // tc_blocks_per_sm > 0 instead sizes chunks as ceil(total / (that x SMs)).
    // Chunks are multiples of 64 x pairs (each pair's sub-chunk a multiple of 64 keys).
    pl.ws_pairs = p.tc_stages == 3 ? 3 : 2;
    const int64_t np = pl.ws_pairs, step = 64 * np;
    const int64_t c_min = (std::max<int64_t>(np * p.kv_chunk, step) + step - 1) / step * step;
    int64_t best = c_min;
    if (p.tc_blocks_per_sm > 0) {
      const int64_t target = p.tc_blocks_per_sm * static_cast<int64_t>(NumSms());
      best = std::max(c_min, ((total + target - 1) / target + step - 1) / step * step);
    } else {
      const int64_t slots = (np == 2 ? 2 : 1) * static_cast<int64_t>(NumSms());
      const bool uniform = total >= p.num_seqs * max_ctx;
      double best_cost = 0;
      const int64_t c_max = std::max(c_min, (max_ctx + step - 1) / step * step);
      for (int64_t c = c_min; c <= c_max; c += step) {
        const int64_t blocks = uniform ? p.num_seqs * ((max_ctx + c - 1) / c) : (total + c - 1) / c + p.num_seqs / 2;
        const double cost = static_cast<double>((blocks + slots - 1) / slots) * static_cast<double>(c + 88);
        if (c == c_min || cost < best_cost) { best_cost = cost; best = c; }
      }
    }
    pl.chunk = best;
    pl.softmax_chunk = best / np;
    pl.tile = kWsBN;
  } else {
    pl.rt = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
    pl.nrb = (rows + pl.rt * 16 - 1) / (pl.rt * 16);
    // Split-KV by work: one chunk size for the batch, ~bpsm blocks per SM over all key rows.
    // Default 2, except 1 for 64-row blocks (128 heads) when the batch has <= 16 row blocks
    // (a 64-row block takes a whole SM, so 2 per SM is 2 waves): 128 heads, batch 1, 32K
    // 70.6 us vs 98.9 us with 2 (mla_decode_2026-11-29_mladec.md), while at batch >= 64 the two
    // are within 1.4%. Larger batches keep run 1's plan (and the split plans the runner's
    // graph-vs-eager check was calibrated on).
    const bool small = pl.rt == 4 && p.num_seqs * pl.nrb <= 16;
    const int bpsm = p.tc_blocks_per_sm > 0 ? p.tc_blocks_per_sm : small ? 1 : 2;
    const int64_t work = pl.nrb * total;
    const int64_t target = bpsm * static_cast<int64_t>(NumSms());
    int64_t chunk = (work + target - 1) / target;
    chunk = (chunk + 63) / 64 * 64;
    pl.chunk = std::max<int64_t>(chunk, p.kv_chunk);
    pl.softmax_chunk = pl.chunk;
    pl.tile = kBN;
  }
  pl.max_splits = std::max<int64_t>(1, (p.max_context + pl.chunk - 1) / pl.chunk);
  return pl;
}

template <typename TOut, int NP, int ST, int MINB>
void LaunchWs(const MlaDecodeParams& p, const TcPlanInfo& pl) {
  constexpr size_t smem = WsSmem<NP, ST>();
  static_assert(smem * MINB <= 227 * 1024, "shared memory per SM");
  // Per device (device_props.h): a process-wide once-flag left GPUs other than the first at 48 KiB.
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaDecodeWsKernel<TOut, NP, ST, MINB, false>),
                       static_cast<int>(smem));
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(MlaDecodeWsKernel<TOut, NP, ST, MINB, true>),
                       static_cast<int>(smem));
  dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(pl.max_splits));
  if (p.tc_cluster_merge > 0 && pl.max_splits >= 2 && pl.max_splits <= 8 && p.uv_w == nullptr) {  // one cluster per sequence
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(NP * 64);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = p.stream;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = static_cast<unsigned>(pl.max_splits);
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = AddPdlAttribute(attr, 1, p.pdl);
    DS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, MlaDecodeWsKernel<TOut, NP, ST, MINB, true>, p, static_cast<int>(pl.chunk),
                                     static_cast<int>(pl.max_splits), true));
    DS_CUDA_CHECK_LAUNCH("MlaDecodeWsKernel (cluster merge)");
    return;
  }
  const bool direct = pl.max_splits == 1 && p.uv_w == nullptr;  // uv: every split writes its partial
  if (p.tc_fused_combine > 0 && !direct && p.uv_w == nullptr && 16 * (pl.max_splits + 1) * 4 <= static_cast<int64_t>(smem)) {
    // Fused combine: the last block of each sequence merges (counters checked by the caller).
    const auto kernel = MlaDecodeWsKernel<TOut, NP, ST, MINB, false, true>;
    EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
    LaunchKernel(kernel, grid, NP * 64, smem, p.stream, p.pdl, p, static_cast<int>(pl.chunk),
                 static_cast<int>(pl.max_splits), false);
    DS_CUDA_CHECK_LAUNCH("MlaDecodeWsKernel (fused combine)");
    return;
  }
  LaunchKernel(MlaDecodeWsKernel<TOut, NP, ST, MINB, false>, grid, NP * 64, smem, p.stream, p.pdl, p,
               static_cast<int>(pl.chunk), static_cast<int>(pl.max_splits), direct);
  DS_CUDA_CHECK_LAUNCH("MlaDecodeWsKernel");
  if (direct) return;
  if (p.uv_w != nullptr) {  // the W_UV epilogue in place of the combine
    MlaDecodeCombineUv(p, static_cast<int>(pl.max_splits));
    return;
  }
  dim3 cgrid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.heads));
  LaunchKernel(MlaDecodeTcCombineFast<TOut>, cgrid, kV / 4, 0, p.stream, p.pdl, p, static_cast<int>(pl.max_splits));
  DS_CUDA_CHECK_LAUNCH("MlaDecodeTcCombine");
}

}  // namespace

int64_t MlaDecodeTcChunk(const MlaDecodeParams& p, int* tile) {
  if (MlaDecodeSm90Selected(p)) return MlaDecodeSm90Chunk(p, tile);
  const TcPlanInfo pl = TcPlan(p);
  if (tile) *tile = pl.tile;
  return pl.softmax_chunk;
}

bool MlaDecodeTcSupported(int64_t kv_lora, int64_t rope_dim, int64_t block_size) {
  return kv_lora == kV && kv_lora + rope_dim == kD && block_size > 0 && block_size % kBN == 0;
}

void MlaDecodeAttentionTc(const MlaDecodeParams& p) {
  DS_CHECK(MlaDecodeTcSupported(p.kv_lora, p.rope_dim, p.block_size))
      << "MlaDecodeAttentionTc: needs kv_lora 512, rope 64, block_size % 32 == 0";
  DS_CHECK(p.kv_chunk > 0 && p.kv_chunk % kBN == 0) << "MlaDecodeAttentionTc: kv_chunk % 32";
  DS_CHECK(p.q_head_stride % 2 == 0 && p.q_tok_stride % 2 == 0 && p.o_head_stride % 4 == 0 && p.o_tok_stride % 4 == 0)
      << "MlaDecodeAttentionTc: strides";
  if (p.num_tokens == 0 || p.num_seqs == 0) return;
  const TcPlanInfo pl = TcPlan(p);
  DS_CHECK(pl.max_splits < 65536 && p.num_seqs * pl.nrb < (int64_t{1} << 31)) << "MlaDecodeAttentionTc: grid too large";
  // Partials go through float2 / float4 stores and float4 loads of the workspace (the row-tile
  // kernel always, the warp-split kernel unless one split writes the output directly).
  DS_CHECK((pl.ws && pl.max_splits == 1 && p.uv_w == nullptr) ||
           (p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0))
      << "MlaDecodeAttentionTc: " << pl.max_splits << " splits need a 16-byte aligned workspace";
  if (pl.ws) {
    if (p.tc_fused_combine > 0) {
      DS_CHECK(p.split_counters != nullptr && p.split_counter_count >= p.num_seqs &&
               reinterpret_cast<uintptr_t>(p.split_counters) % alignof(uint32_t) == 0)
          << "MlaDecodeAttentionTc: tc_fused_combine needs split_counters (" << p.split_counter_count << " given, "
          << p.num_seqs << " needed: one zeroed uint32 per sequence)";
    }
    if (pl.ws_pairs == 3) {
      if (p.out_type == DTypeOut::kF32) LaunchWs<float, 3, 3, 1>(p, pl);
      else LaunchWs<__nv_bfloat16, 3, 3, 1>(p, pl);
    } else {
      if (p.out_type == DTypeOut::kF32) LaunchWs<float, 2, 2, 2>(p, pl);
      else LaunchWs<__nv_bfloat16, 2, 2, 2>(p, pl);
    }
    return;
  }
  const int n = static_cast<int>(pl.nrb), c = static_cast<int>(pl.chunk), ms = static_cast<int>(pl.max_splits);
  const bool q_aligned = reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && p.q_tok_stride % 4 == 0 && p.q_head_stride % 4 == 0;
  if (p.tc_fast_io >= 0 && q_aligned) DispatchTc<true>(p, pl.rt, n, c, ms);
  else DispatchTc<false>(p, pl.rt, n, c, ms);
}

}  // namespace ds::cuda
