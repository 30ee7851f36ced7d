#include "backend/cuda/device_props.h"
#include "backend/cuda/grouped_gemm.h"

#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/grouped_gemm_sm90.h"
#include "backend/cuda/grouped_gemm_sm90_mixed.h"

namespace ds::cuda {
namespace {

using namespace nvcuda;

constexpr int BM = 64, BN = 64, BK = 32, LDS = BK + 8, LDC = BN + 4;

template <bool kFp8, typename TOut>
__global__ void __launch_bounds__(128) GroupedGemmKernel(GroupedGemmParams p) {
  __shared__ __align__(32) __nv_bfloat16 As[BM * LDS];
  __shared__ __align__(32) __nv_bfloat16 Bs[BN * LDS];
  __shared__ __align__(32) float Cs[BM * LDC];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * BM;
  const int64_t E = p.num_experts;
  if (row0 >= p.offsets[E]) return;
  // Expert owning this tile: the last e with offsets[e] <= row0.
  int64_t lo = 0, hi = E - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (p.offsets[mid] <= row0) lo = mid; else hi = mid - 1;
  }
  const int64_t e = lo;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int lr = tid >> 1, lk = (tid & 1) * 16;  // loader: row/col of 16 elements
  const bool vec_a = (p.K % 8 == 0) && (p.lda % 8 == 0);
  const int64_t kb_count = (p.K + 127) / 128, nb_count = (p.N + 127) / 128;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  const __nv_bfloat16* arow = p.a + (row0 + lr) * p.lda;
  const int64_t ng = n0 + lr;
  const bool n_ok = ng < p.N;
  for (int64_t k0 = 0; k0 < p.K; k0 += BK) {
    // A tile.
    {
      const int64_t kg = k0 + lk;
      __nv_bfloat16* dst = As + lr * LDS + lk;
      if (vec_a && kg + 16 <= p.K) {
        const uint4* src = reinterpret_cast<const uint4*>(arow + kg);
        reinterpret_cast<uint4*>(dst)[0] = src[0];
        reinterpret_cast<uint4*>(dst)[1] = src[1];
      } else {
        for (int i = 0; i < 16; ++i) dst[i] = kg + i < p.K ? arow[kg + i] : __float2bfloat16_rn(0.f);
      }
    }
    // B tile (w[e][n][k]).
    {
      const int64_t kg = k0 + lk;
      __nv_bfloat16* dst = Bs + lr * LDS + lk;
      if (!n_ok) {
        for (int i = 0; i < 16; ++i) dst[i] = __float2bfloat16_rn(0.f);
      } else if constexpr (kFp8) {
        const uint8_t* wr = static_cast<const uint8_t*>(p.w) + (e * p.N + ng) * p.K;
        const float s = p.w_scales[(e * nb_count + ng / 128) * kb_count + kg / 128];
        if (p.K % 16 == 0 && kg + 16 <= p.K) {
          uint4 raw = *reinterpret_cast<const uint4*>(wr + kg);
          const uint8_t* b8 = reinterpret_cast<const uint8_t*>(&raw);
#pragma unroll
          for (int i = 0; i < 16; ++i) dst[i] = __float2bfloat16_rn(dev::E4M3ToF32(b8[i]) * s);
        } else {
          for (int i = 0; i < 16; ++i)
            dst[i] = __float2bfloat16_rn(kg + i < p.K ? dev::E4M3ToF32(wr[kg + i]) * s : 0.f);
        }
      } else {
        const __nv_bfloat16* wr = static_cast<const __nv_bfloat16*>(p.w) + (e * p.N + ng) * p.K;
        if (p.K % 8 == 0 && kg + 16 <= p.K) {
          const uint4* src = reinterpret_cast<const uint4*>(wr + kg);
          reinterpret_cast<uint4*>(dst)[0] = src[0];
          reinterpret_cast<uint4*>(dst)[1] = src[1];
        } else {
          for (int i = 0; i < 16; ++i) dst[i] = kg + i < p.K ? wr[kg + i] : __float2bfloat16_rn(0.f);
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> af[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bf[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(af[i], As + (wm * 32 + i * 16) * LDS + kk, LDS);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(bf[j], Bs + (wn * 32 + j * 16) * LDS + kk, LDS);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16, acc[i][j], LDC, wmma::mem_row_major);
  __syncthreads();
  TOut* out = static_cast<TOut*>(p.out);
  for (int idx = tid; idx < BM * BN; idx += blockDim.x) {
    const int r = idx / BN, c = idx % BN;
    if (n0 + c < p.N) out[(row0 + r) * p.ldo + n0 + c] = dev::FromF<TOut>(Cs[r * LDC + c]);
  }
}

// ---------------------------------------------------------------------------------------------
// Large-tile kernel: mma.sync m16n8k16 bf16 (fp32 accumulation), 128x128x64 block tiles, 8 warps
// (2 x 4, 64x32 each), a 4-stage cp.async pipeline, XOR-swizzled shared memory, persistent CTAs.
//
// Tiles. Segments are 64-row aligned but the tile is 128 rows, so a 128-row tile never spans two
// experts: expert e owns ceil(len_e / 128) row tiles; every CTA scans offsets (in shared memory)
// into the exclusive prefix tile_start[e], then walks tiles t = blockIdx.x, += gridDim.x (row tile
// t / n_tiles, n tile t % n_tiles: consecutive CTAs share the A rows, an expert's row tiles run
// together so its weights stream through L2 once). Rows past the segment end load as zeros
// (cp.async zero fill) and are not stored.
//
// Fragments. Instead of ldmatrix every thread reads its fragments with one 16-byte (bf16) or
// 8-byte (e4m3) shared load per row and k32 step, with K permuted inside each 32-wide k step:
// mma k slot 2q+j (j = 0, 1) of sub-step s is physical k 8q+4s+j, slot 2q+8+j is 8q+4s+2+j
// (q = lane % 4). A and B use the same permutation, so the dot products are unchanged; the gain
// is that an e4m3 B fragment is one contiguous 4-byte word per sub-step that converts in
// registers (below), with no dequantised copy in shared memory.
//
// Swizzle (conflict-free for these loads and for the cp.async stores): bf16 rows are 128 B (8
// chunks of 16 B), chunk c of row r lives at c ^ ((r & 1) << 2); e4m3 rows are 64 B (4 chunks),
// chunk c at c ^ (((r >> 1) & 1) << 1).
//
// FP8. e4m3 -> bf16 exactly: bits (s << 15) | ((x & 0x7f) << 4) are the bf16 of value * 2^-120
// (normal and subnormal alike), times 2^120 in bf16x2 (bf16 arithmetic keeps subnormals).
// The 128x128 block scale is applied after the MMA: each 128-wide K block accumulates into
// `part`, then acc += scale * part in fp32 (the CTA's 128 columns are one scale block).
namespace mmak {

constexpr int kBM = 128, kBN = 128, kBK = 64, kStages = 4, kThreads = 256, kMaxExperts = 1024;

template <bool kFp8> struct Cfg {
  static constexpr int kABytes = kBM * kBK * 2;
  static constexpr int kBBytes = kBN * kBK * (kFp8 ? 1 : 2);
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kPipeBytes = kStages * kStageBytes;
};

using ptx::CpAsync16;
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void CpAsyncWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void Mma(float* c, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two e4m3 bytes of `w` (bytes 0,1 if !hi else 2,3) -> bf16x2 (lower byte in the low half), exact.
__device__ __forceinline__ uint32_t E4m3x2ToBf16x2(uint32_t w, bool hi) {
  const uint32_t l = __byte_perm(w, 0u, hi ? 0x3424u : 0x1404u);  // each byte in the top of a 16-bit lane
  const uint32_t bits = (l & 0x80008000u) | ((l & 0x7f007f00u) >> 4);
  __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&bits);
  const uint32_t two120 = 0x7B807B80u;  // bf16 2^120 in both lanes
  v = __hmul2(v, *reinterpret_cast<const __nv_bfloat162*>(&two120));
  return *reinterpret_cast<uint32_t*>(&v);
}

template <bool kFp8, typename TOut>
__global__ void __launch_bounds__(kThreads, 1) GroupedGemmMmaKernel(GroupedGemmParams p) {
  using C = Cfg<kFp8>;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_warp[kThreads / 32];
  const int E = static_cast<int>(p.num_experts);
  int* s_off = reinterpret_cast<int*>(smem + C::kPipeBytes);  // [E + 1] expert offsets
  int* s_tile = s_off + E + 1;                                 // [E + 1] first row tile of expert e
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  for (int i = tid; i <= E; i += kThreads) s_off[i] = p.offsets[i];
  __syncthreads();
  int carry = 0;
  for (int base = 0; base < E; base += kThreads) {
    const int e = base + tid;
    const int c = e < E ? (s_off[e + 1] - s_off[e] + kBM - 1) / kBM : 0;
    int x = c;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, d);
      if (lane >= d) x += y;
    }
    if (lane == 31) s_warp[warp] = x;
    __syncthreads();
    int before = carry, total = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) {
      before += w < warp ? s_warp[w] : 0;
      total += s_warp[w];
    }
    if (e < E) s_tile[e] = before + x - c;
    carry += total;
    __syncthreads();
  }
  if (tid == 0) s_tile[E] = carry;
  __syncthreads();
  const int row_tiles = s_tile[E];

  const int64_t N = p.N, K = p.K;
  const int n_tiles = static_cast<int>((N + kBN - 1) / kBN);
  const int ktiles = static_cast<int>((K + kBK - 1) / kBK);
  const int64_t total_tiles = static_cast<int64_t>(row_tiles) * n_tiles;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  // Fragment-read geometry (see the comment above the namespace).
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, q = lane & 3;
  const int a_row = wm * 64 + g, b_row = wn * 32 + g;
  const int sw16 = (g & 1) << 2;                        // bf16 row swizzle (row parity = g parity)
  const int sw8 = ((g >> 1) & 1) << 1;                  // e4m3 row swizzle
  const int64_t kb_count = (K + 127) / 128, nb_count = (N + 127) / 128;

  if (static_cast<int64_t>(blockIdx.x) >= total_tiles) return;

  // Tile t -> expert, first row, valid rows, first column.
  struct Tile { int64_t row0, n0; int rows, e; };
  const auto decode = [&](int64_t t) {
    const int rt = static_cast<int>(t / n_tiles), nt = static_cast<int>(t % n_tiles);
    int lo = 0, hi = E - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (s_tile[mid] <= rt) lo = mid; else hi = mid - 1;
    }
    Tile tl;
    tl.e = lo;
    tl.row0 = s_off[lo] + static_cast<int64_t>(rt - s_tile[lo]) * kBM;
    const int64_t rem = s_off[lo + 1] - tl.row0;
    tl.rows = static_cast<int>(rem < kBM ? rem : kBM);
    tl.n0 = static_cast<int64_t>(nt) * kBN;
    return tl;
  };

  // Loads k tile kt of tile tl into stage slot `stage`.
  const auto load_stage = [&](int stage, const Tile& tl, int kt) {
    const uint32_t sa = smem_base + stage * C::kStageBytes, sb = sa + C::kABytes;
    const int64_t k0 = static_cast<int64_t>(kt) * kBK;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // A: 128 rows x 8 chunks
      const int id = tid + i * kThreads, r = id >> 3, c = id & 7;
      const int64_t k = k0 + c * 8;
      const bool ok = r < tl.rows && k < K;
      const __nv_bfloat16* src = ok ? p.a + (tl.row0 + r) * p.lda + k : p.a;
      CpAsync16(sa + r * 128 + ((c ^ ((r & 1) << 2)) << 4), src, ok);
    }
    if constexpr (kFp8) {
      const uint8_t* w = static_cast<const uint8_t*>(p.w);
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // B: 128 rows x 4 chunks of 16 e4m3
        const int id = tid + i * kThreads, r = id >> 2, c = id & 3;
        const int64_t k = k0 + c * 16;
        const bool ok = tl.n0 + r < N && k < K;
        const uint8_t* src = ok ? w + (tl.e * N + tl.n0 + r) * K + k : w;
        CpAsync16(sb + r * 64 + ((c ^ (((r >> 1) & 1) << 1)) << 4), src, ok);
      }
    } else {
      const __nv_bfloat16* w = static_cast<const __nv_bfloat16*>(p.w);
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // B: 128 rows x 8 chunks
        const int id = tid + i * kThreads, r = id >> 3, c = id & 7;
        const int64_t k = k0 + c * 8;
        const bool ok = tl.n0 + r < N && k < K;
        const __nv_bfloat16* src = ok ? w + (tl.e * N + tl.n0 + r) * K + k : w;
        CpAsync16(sb + r * 128 + ((c ^ ((r & 1) << 2)) << 4), src, ok);
      }
    }
  };

  // One pipeline across all of this CTA's tiles: the producer runs kStages - 1 k tiles ahead of
  // the consumer, into the next tile once the current one is fully issued, so the next tile's
  // first loads overlap the current tile's last MMAs and its epilogue.
  int64_t pt = blockIdx.x;  // producer: tile, its geometry, next k tile, next slot
  Tile ptl = decode(pt);
  int pk = 0, pslot = 0;
  const auto produce = [&] {
    if (pt < total_tiles) {
      load_stage(pslot, ptl, pk);
      if (++pk == ktiles) {
        pk = 0;
        pt += gridDim.x;
        if (pt < total_tiles) ptl = decode(pt);
      }
    }
    CpAsyncCommit();  // possibly empty: keeps one group per consumer step
    pslot = pslot + 1 == kStages ? 0 : pslot + 1;
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) produce();

  int cslot = 0;
  for (int64_t ct = blockIdx.x; ct < total_tiles; ct += gridDim.x) {
    const Tile tl = decode(ct);
    // A 64-row (odd-slot) tile: the warps of the empty half skip the MMAs (loads and barriers
    // stay CTA-wide), so small segments cost half a tile of tensor work, not a whole one.
    const bool warp_active = wm * 64 < tl.rows;

    float acc[4][4][4];
    float part[kFp8 ? 4 : 1][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          acc[i][j][v] = 0.f;
          if constexpr (kFp8) part[i][j][v] = 0.f;
        }
    const float* scale_row = kFp8 ? p.w_scales + (tl.e * nb_count + tl.n0 / 128) * kb_count : nullptr;
    float scale = 0.f;

    for (int kt = 0; kt < ktiles; ++kt) {
      if constexpr (kFp8) {
        if ((kt & 1) == 0) scale = __ldg(scale_row + (kt >> 1));  // used two k tiles later
      }
      CpAsyncWait<kStages - 2>();
      __syncthreads();  // slot cslot is loaded; every warp is done with the slot produce() refills
      produce();
      const uint8_t* sa = smem + cslot * C::kStageBytes;
      const uint8_t* sb = sa + C::kABytes;
      cslot = cslot + 1 == kStages ? 0 : cslot + 1;
#pragma unroll
      for (int u = 0; u < 2; ++u) {  // two k32 steps per k tile
        if (!warp_active) break;     // warp-uniform: all of this warp's 64 rows are past the segment
        uint4 av[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = a_row + i * 16 + h * 8;
            av[i][h] = *reinterpret_cast<const uint4*>(sa + r * 128 + (((4 * u + q) ^ sw16) << 4));
          }
        uint32_t bv[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int r = b_row + j * 8;
          if constexpr (kFp8) {
            const uint2 raw = *reinterpret_cast<const uint2*>(sb + r * 64 + (((2 * u + (q >> 1)) ^ sw8) << 4) + ((q & 1) << 3));
            bv[j][0] = E4m3x2ToBf16x2(raw.x, false);
            bv[j][1] = E4m3x2ToBf16x2(raw.x, true);
            bv[j][2] = E4m3x2ToBf16x2(raw.y, false);
            bv[j][3] = E4m3x2ToBf16x2(raw.y, true);
          } else {
            const uint4 raw = *reinterpret_cast<const uint4*>(sb + r * 128 + (((4 * u + q) ^ sw16) << 4));
            bv[j][0] = raw.x; bv[j][1] = raw.y; bv[j][2] = raw.z; bv[j][3] = raw.w;
          }
        }
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint32_t* w0 = reinterpret_cast<const uint32_t*>(&av[i][0]);
            const uint32_t* w1 = reinterpret_cast<const uint32_t*>(&av[i][1]);
            const uint32_t a[4] = {w0[2 * s], w1[2 * s], w0[2 * s + 1], w1[2 * s + 1]};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              if constexpr (kFp8) Mma(part[i][j], a, bv[j][2 * s], bv[j][2 * s + 1]);
              else Mma(acc[i][j], a, bv[j][2 * s], bv[j][2 * s + 1]);
            }
          }
      }
      if constexpr (kFp8) {
        if ((kt & 1) == 1 || kt == ktiles - 1) {  // end of a 128-wide K block
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
              for (int v = 0; v < 4; ++v) {
                acc[i][j][v] = fmaf(scale, part[i][j][v], acc[i][j][v]);
                part[i][j][v] = 0.f;
              }
        }
      }
    }

    // Epilogue straight from the accumulators (the next tile's loads are already in flight).
    TOut* out = static_cast<TOut*>(p.out);
    const bool pair_ok = (p.ldo % 2) == 0 && reinterpret_cast<uintptr_t>(p.out) % (2 * sizeof(TOut)) == 0;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * 64 + i * 16 + h * 8 + g;
        if (r >= tl.rows) continue;
        TOut* orow = out + (tl.row0 + r) * p.ldo;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t col = tl.n0 + wn * 32 + j * 8 + 2 * q;
          const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
          if (pair_ok && col + 1 < N) {
            if constexpr (std::is_same_v<TOut, float>) *reinterpret_cast<float2*>(orow + col) = make_float2(v0, v1);
            else *reinterpret_cast<__nv_bfloat162*>(orow + col) = __floats2bfloat162_rn(v0, v1);
          } else {
            if (col < N) orow[col] = dev::FromF<TOut>(v0);
            if (col + 1 < N) orow[col + 1] = dev::FromF<TOut>(v1);
          }
        }
      }
  }
  CpAsyncWait<0>();  // only empty groups remain; leave nothing in flight at exit
}

size_t SmemBytes(bool fp8, int64_t E) {
  return static_cast<size_t>(fp8 ? Cfg<true>::kPipeBytes : Cfg<false>::kPipeBytes) + 2 * (E + 1) * sizeof(int);
}

int NumSms() { return CurrentDeviceProps().sms; }

template <bool kFp8, typename TOut>
void LaunchMma(const GroupedGemmParams& p) {
  auto kernel = GroupedGemmMmaKernel<kFp8, TOut>;
  const size_t smem = SmemBytes(kFp8, p.num_experts);
  // Per device (device_props.h): a process-wide once-flag left GPUs other than the first at 48 KiB.
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(SmemBytes(kFp8, kMaxExperts)));
  // Upper bound on row tiles: sum_e ceil(len_e / 128) with len_e a multiple of 64.
  const int64_t slots = (p.max_rows + 63) / 64;
  const int64_t row_tiles = (slots + std::min<int64_t>(p.num_experts, slots) + 1) / 2;
  const int64_t tiles = row_tiles * ((p.N + kBN - 1) / kBN);
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(tiles, NumSms())));
  kernel<<<grid, kThreads, smem, p.stream>>>(p);
}

}  // namespace mmak

bool MmaPathUsable(const GroupedGemmParams& p) {
  const auto aligned16 = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  return !p.force_wmma && p.num_experts <= mmak::kMaxExperts && p.K % (p.w_fp8 ? 16 : 8) == 0 && p.lda % 8 == 0 &&
         aligned16(p.a) && aligned16(p.w);
}

template <bool kFp8>
void Launch(const GroupedGemmParams& p, dim3 grid) {
  if (p.out_type == DTypeOut::kF32) GroupedGemmKernel<kFp8, float><<<grid, 128, 0, p.stream>>>(p);
  else GroupedGemmKernel<kFp8, __nv_bfloat16><<<grid, 128, 0, p.stream>>>(p);
}

GroupedGemmSm90Params Sm90Params(const GroupedGemmParams& p) {
  GroupedGemmSm90Params s{};
  s.input = Sm90GemmInput::kBf16;
  s.a = p.a; s.lda = p.lda; s.offsets = p.offsets; s.max_rows = p.max_rows;
  s.w = p.w; s.num_experts = p.num_experts; s.N = p.N; s.K = p.K;
  s.out = p.out; s.out_type = p.out_type; s.ldo = p.ldo;
  s.workspace = p.workspace; s.workspace_bytes = p.workspace_bytes; s.stream = p.stream;
  return s;
}

bool Sm90Applies(const GroupedGemmParams& p) {
  return p.sm90 && !p.force_wmma && !p.w_fp8 && GroupedGemmSm90Available() &&
         GroupedGemmSm90Unsupported(Sm90Params(p)).empty();
}

// FP8 weights (bf16 activations) on the sm_90a mixed-input kernel: when sm90_mixed is set.
bool Sm90MixedApplies(const GroupedGemmParams& p) {
  return p.sm90_mixed && !p.force_wmma && p.w_fp8 && GroupedGemmSm90MixedAvailable() &&
         GroupedGemmSm90MixedUnsupported(p).empty();
}

}  // namespace

size_t GroupedGemmWorkspaceBytes(const GroupedGemmParams& p) {
  if (Sm90MixedApplies(p)) return GroupedGemmSm90MixedWorkspaceBytes(p.num_experts, p.N, p.K);
  if (!Sm90Applies(p)) return 0;
  return GroupedGemmSm90WorkspaceBytes(Sm90GemmInput::kBf16, p.num_experts, p.max_rows, p.N, p.K);
}

void GroupedGemm(const GroupedGemmParams& p) {
  DS_CHECK(p.N > 0 && p.K > 0 && p.num_experts > 0) << "GroupedGemm: bad shape N=" << p.N << " K=" << p.K;
  DS_CHECK(!p.w_fp8 || p.w_scales) << "GroupedGemm: FP8 weights need w_scales";
  DS_CHECK(p.a_rows == nullptr) << "GroupedGemm: gathered rows (a_rows) are SkinnyGemm's only";
  if (p.max_rows == 0) return;
  if (p.workspace && Sm90Applies(p) &&
      p.workspace_bytes >= GroupedGemmSm90WorkspaceBytes(Sm90GemmInput::kBf16, p.num_experts, p.max_rows, p.N, p.K)) {
    GroupedGemmSm90(Sm90Params(p));
    return;
  }
  if (p.workspace && Sm90MixedApplies(p) &&
      p.workspace_bytes >= GroupedGemmSm90MixedWorkspaceBytes(p.num_experts, p.N, p.K)) {
    GroupedGemmSm90Mixed(p);
    return;
  }
  if (MmaPathUsable(p)) {
    if (p.w_fp8) {
      if (p.out_type == DTypeOut::kF32) mmak::LaunchMma<true, float>(p);
      else mmak::LaunchMma<true, __nv_bfloat16>(p);
    } else {
      if (p.out_type == DTypeOut::kF32) mmak::LaunchMma<false, float>(p);
      else mmak::LaunchMma<false, __nv_bfloat16>(p);
    }
    DS_CUDA_CHECK_LAUNCH("GroupedGemmMmaKernel");
    return;
  }
  DS_CHECK(p.max_rows / BM < 65535) << "GroupedGemm: too many rows " << p.max_rows;
  dim3 grid(dev::CeilDiv(p.N, BN), dev::CeilDiv(p.max_rows, BM));
  if (p.w_fp8) Launch<true>(p, grid); else Launch<false>(p, grid);
  DS_CUDA_CHECK_LAUNCH("GroupedGemmKernel");
}

}  // namespace ds::cuda
