#include "backend/cuda/device_props.h"
#include "backend/cuda/skinny_gemm.h"

#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_combine_norm.cuh"

namespace ds::cuda {
namespace {

constexpr int kTileM = 16;  // weight rows per mma tile (the mma's 16-row operand)
constexpr int kMaxSplits = 16;

// Kernel arguments: the op's params plus the batched-group strides and the split-K plan.
struct KArgs {
  GroupedGemmParams p;
  int64_t ga, gw, go;    // per-group strides (elements) of a, w, out (batched form)
  int64_t cps;           // K chunks per split
  int splits;
  float* ws;             // [splits, ws_rows, N] fp32 partials (splits > 1)
  uint32_t* counters;    // [gridDim.y * gridDim.x] arrival counters, zero between launches
  int64_t ws_rows;
  bool silu = false;     // SkinnyGemmParams::silu_pair (the plain kernel's SiLU instance)
};

using ptx::LdStream;
using ptx::Mma;

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Two e4m3 bytes of x (selected by `sel`: 0x4140 = bytes 0,1; 0x4342 = bytes 2,3) to bf16x2,
// exactly: the sign and the 7 exponent/mantissa bits move into bf16 position, which is the value
// times 2^-120 for normal and subnormal e4m3 alike; one bf16 multiply by 2^120 restores it.
__device__ __forceinline__ uint32_t E4M3x2ToBf16x2(uint32_t x, uint32_t sel) {
  const uint32_t y = __byte_perm(x, 0u, sel);  // bytes [0, hi, 0, lo]
  uint32_t t = ((y << 8) & 0x80008000u) | ((y << 4) & 0x07f007f0u);
  __nv_bfloat162 v;
  __builtin_memcpy(&v, &t, 4);
  v = __hmul2(v, __nv_bfloat162(__float2bfloat16_rn(0x1p120f), __float2bfloat16_rn(0x1p120f)));
  __builtin_memcpy(&t, &v, 4);
  return t;
}

// Warp 0's accumulator (mt, nt, i) plus warps 1 .. kWarps - 1's K slices of it (s_red, in warp
// order): the block's sum for that output element.
template <int kWarps, int kMT, int kNT>
__device__ __forceinline__ float SumKSlices(const float (&acc)[kMT][kNT][4],
                                            const float (&s_red)[kWarps - 1][kMT][kNT][4][32], int mt, int nt, int i,
                                            int lane) {
  float v = acc[mt][nt][i];
#pragma unroll
  for (int w = 0; w < kWarps - 1; ++w) v += s_red[w][mt][nt][i][lane];
  return v;
}

// 16 bytes of weight row `w` (element size kEs) starting at element k; zeros past K or past N.
template <int kEs>
__device__ __forceinline__ uint4 LoadW(const uint8_t* w, bool ok, int64_t k, int64_t K, bool vec) {
  uint4 r = make_uint4(0, 0, 0, 0);
  if (!ok || k >= K) return r;
  if (vec) return LdStream(w + k * kEs);
  uint8_t b[16];
  constexpr int kN = 16 / kEs;
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < kEs; ++j) b[i * kEs + j] = k + i < K ? w[(k + i) * kEs + j] : 0;
  __builtin_memcpy(&r, b, 16);
  return r;
}

// 8 bf16 activations of row `a` starting at k; zeros past K or for rows past the group.
__device__ __forceinline__ uint4 LoadA(const __nv_bfloat16* a, bool ok, int64_t k, int64_t K, bool vec) {
  uint4 r = make_uint4(0, 0, 0, 0);
  if (!ok || k >= K) return r;
  if (vec) return __ldg(reinterpret_cast<const uint4*>(a + k));
  __nv_bfloat16 v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = k + i < K ? a[k + i] : __float2bfloat16_rn(0.f);
  __builtin_memcpy(&r, v, 16);
  return r;
}

// SkinnyCombineEpilogue (skinny_gemm.h): the block's stores are ordered before thread 0's
// count by the barrier and thread 0's fence (cumulativity: what the barrier made visible to
// thread 0 is released with its fence), and the last block of the grid runs the combine + norm
// for every token after thread 0's acquiring fence and a barrier. One fence per block (every
// thread fencing measured the same, session 10 run 5; the fused kernels' extra time is the last
// block's row, moe_combine_norm.cuh). Every thread of the block calls it, at each of the
// kernel's exits.
__device__ __forceinline__ void CountOutAndCombine(const SkinnyCombineEpilogue& epi) {
  __shared__ bool s_last;
  __shared__ float red[32];
  __shared__ int32_t s_pos[combine::kMaxSlots];
  __shared__ float s_w[combine::kMaxSlots];
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const uint32_t blocks = gridDim.x * gridDim.y * gridDim.z;
    const bool last = atomicAdd(epi.counter, 1u) == blocks - 1;
    if (last) {
      __threadfence();
      *epi.counter = 0u;  // every block has counted: ready for the next launch / replay
    }
    s_last = last;
  }
  __syncthreads();
  if (!s_last) return;
  for (int64_t t = 0; t < epi.cn.n; ++t) {
    if (epi.cn.y_bf16) combine::CombineNormRow<__nv_bfloat16>(epi.cn, t, red, s_pos, s_w);
    else combine::CombineNormRow<float>(epi.cn, t, red, s_pos, s_w);
  }
}

// Block (blockIdx.x = tile of kMT x 16 weight rows, blockIdx.y = non-empty group slot), kWarps
// warps splitting K in chunks of 64 bytes per weight row (4 lanes x 16 bytes). mma fragment mapping ("swap AB"):
// lane (g = lane / 4, q = lane % 4) holds weight rows n0 + g and n0 + g + 8 and activation row
// t0 + g; the 16 contiguous bytes a lane loads are the k values it owns in kEpl / 4 consecutive
// k16 steps (the dot product is order-free, so A and B only need the same k permutation).
// The plain kernel's body; kCombine: with the combine epilogue (*epi) at every exit
// (SkinnyGemmCombineKernel), a separate instance so that the default kernels keep their code
// (an epilogue call in them cost stack frames and spills).
// kSilu (SkinnyGemmSiluKernel; SkinnyGemmParams::silu_pair, kMT == 2): block x takes gate rows
// [16 x, 16 x + 16) as m-tile 0 and the same up rows N / 2 + [16 x, 16 x + 16) as m-tile 1, and
// warp 0 writes silu(gate) * up as TOut into out [rows, N / 2] (SiluAndMulKernel's operations on
// the fp32 sums).
template <bool kFp8, int kNT, typename TOut, int kWarps, int kMT, int kMinBlocks, int kUDiv, bool kCombine,
          bool kSilu = false>
__device__ __forceinline__ void SkinnyGemmBody(const GroupedGemmParams& p, const SkinnyCombineEpilogue* epi) {
  static_assert(!kSilu || (kMT == 2 && !kCombine), "the SiLU pair needs two m-tiles and no combine");
  constexpr int kThreads = kWarps * 32;
  constexpr int kTileN = kTileM * kMT;       // weight rows per block
  constexpr int kEs = kFp8 ? 1 : 2;          // weight element bytes
  constexpr int kEpl = 16 / kEs;             // weight elements per lane load (16 fp8 / 8 bf16)
  constexpr int kChunkK = 4 * kEpl;          // k per chunk
  constexpr int kSteps = kEpl / 4;           // k16 mma steps per chunk
  constexpr int kAv = kEpl / 8;              // 16-byte activation loads per lane, chunk, 8 rows
  // chunks per warp iteration: ~8 weight loads per lane in flight
  constexpr int kU = std::max(1, ((kFp8 && kNT == 2) ? 2 : 4) / (kMT * kUDiv));

  __shared__ int s_group;
  __shared__ int s_cnt[kWarps];
  __shared__ float s_red[kWarps - 1][kMT][kNT][4][32];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  int64_t e = 0, row0 = 0, rows = p.max_rows;
  if (p.offsets != nullptr) {
    const int64_t E = p.num_experts;
    if (static_cast<int64_t>(gridDim.y) == E) {
      e = blockIdx.y;
    } else {  // the blockIdx.y-th non-empty group
      const int j = static_cast<int>(blockIdx.y);
      if (tid == 0) s_group = -1;
      int seen = 0;
      for (int64_t b = 0; b < E; b += kThreads) {
        const int64_t ee = b + tid;
        const bool f = ee < E && p.offsets[ee + 1] > p.offsets[ee];
        const unsigned m = __ballot_sync(0xffffffffu, f);
        __syncthreads();
        if (lane == 0) s_cnt[warp] = __popc(m);
        __syncthreads();
        int before = seen, total = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          const int c = s_cnt[w];
          if (w < warp) before += c;
          total += c;
        }
        if (f && before + __popc(m & ((1u << lane) - 1u)) == j) s_group = static_cast<int>(ee);
        seen += total;
        if (seen > j) break;
      }
      __syncthreads();
      if (s_group < 0) {
        if constexpr (kCombine) CountOutAndCombine(*epi);
        return;
      }
      e = s_group;
    }
    row0 = p.offsets[e];
    rows = p.offsets[e + 1] - row0;
    if (rows <= 0) {
      if constexpr (kCombine) CountOutAndCombine(*epi);
      return;
    }
  }

  const int64_t N = p.N, K = p.K;
  const int64_t I = N / 2;  // kSilu: gate rows [0, I), up rows [I, N)
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * (kSilu ? kTileM : kTileN);
  // First row of m-tile mt: n0 + 16 mt (kSilu: n0 + I mt). Rows held by this lane: that + g (A)
  // and + 8 (B).
  const auto tile_row = [&](int mt) -> int64_t { return kSilu ? n0 + I * mt : n0 + kTileM * mt; };
  const uint8_t* wA[kMT];
  const uint8_t* wB[kMT];
  bool okA[kMT], okB[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int64_t nA = tile_row(mt) + g, nB = nA + 8;
    okA[mt] = kSilu ? n0 + g < I : nA < N;
    okB[mt] = kSilu ? n0 + g + 8 < I : nB < N;
    wA[mt] = static_cast<const uint8_t*>(p.w) + (e * N + nA) * K * kEs;
    wB[mt] = static_cast<const uint8_t*>(p.w) + (e * N + nB) * K * kEs;
  }
  const bool vec = (K * kEs) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && p.lda % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(p.a) % 16 == 0;
  const int64_t nchunks = (K + kChunkK - 1) / kChunkK;
  const int64_t kb_count = (K + 127) / 128, nb_count = (N + 127) / 128;
  // FP8 block scales of each m-tile's 128-row block (16-row tiles never straddle one).
  const float* srow[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    srow[mt] = nullptr;
    if constexpr (kFp8) srow[mt] = p.w_scales + (e * nb_count + std::min(tile_row(mt), N - 1) / 128) * kb_count;
  }

  for (int64_t t0 = 0; t0 < rows; t0 += 8 * kNT) {
    float acc[kMT][kNT][4];
    const __nv_bfloat16* arow[kNT];
    bool aok[kNT];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int64_t t = t0 + nt * 8 + g;
      aok[nt] = t < rows;
      // Gathered rows: the source row of product row row0 + t (read only for rows of the group).
      const int64_t ar = p.a_rows == nullptr ? row0 + t : aok[nt] ? int64_t{p.a_rows[row0 + t]} : 0;
      arow[nt] = p.a + ar * p.lda;
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
    for (int64_t c0 = static_cast<int64_t>(warp) * kU; c0 < nchunks; c0 += kWarps * kU) {
      uint4 wa[kMT][kU], wb[kMT][kU], av[kU][kNT][kAv];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t kl = (c0 + u) * kChunkK + q * kEpl;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          wa[mt][u] = LoadW<kEs>(wA[mt], okA[mt], kl, K, vec);
          wb[mt][u] = LoadW<kEs>(wB[mt], okB[mt], kl, K, vec);
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int v = 0; v < kAv; ++v) av[u][nt][v] = LoadA(arow[nt], aok[nt], kl + 8 * v, K, vec);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (c0 + u >= nchunks) break;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          if constexpr (kFp8) {
            float t[kNT][4];
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) t[nt][i] = 0.f;
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
              const uint32_t xa = Word(wa[mt][u], s), xb = Word(wb[mt][u], s);
              const uint32_t a0 = E4M3x2ToBf16x2(xa, 0x4140), a2 = E4M3x2ToBf16x2(xa, 0x4342);
              const uint32_t a1 = E4M3x2ToBf16x2(xb, 0x4140), a3 = E4M3x2ToBf16x2(xb, 0x4342);
#pragma unroll
              for (int nt = 0; nt < kNT; ++nt) {
                const uint4& bv = av[u][nt][s / 2];
                Mma(t[nt], a0, a1, a2, a3, Word(bv, (s % 2) * 2), Word(bv, (s % 2) * 2 + 1));
              }
            }
            const float sc = __ldg(srow[mt] + (c0 + u) * kChunkK / 128);
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[mt][nt][i] = fmaf(sc, t[nt][i], acc[mt][nt][i]);
          } else {
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
              const uint32_t a0 = Word(wa[mt][u], 2 * s), a2 = Word(wa[mt][u], 2 * s + 1);
              const uint32_t a1 = Word(wb[mt][u], 2 * s), a3 = Word(wb[mt][u], 2 * s + 1);
#pragma unroll
              for (int nt = 0; nt < kNT; ++nt) {
                const uint4& bv = av[u][nt][0];
                Mma(acc[mt][nt], a0, a1, a2, a3, Word(bv, 2 * s), Word(bv, 2 * s + 1));
              }
            }
          }
        }
      }
    }
    // Sum the warps' K slices; warp 0 writes. C fragment: c0, c1 = (row tile_row(mt) + g, rows
    // t 2q, 2q+1), c2, c3 = (row + 8, same t).
    if (warp > 0) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) s_red[warp - 1][mt][nt][i][lane] = acc[mt][nt][i];
    }
    __syncthreads();
    if (warp == 0) {
      TOut* out = static_cast<TOut*>(p.out);
      if constexpr (kSilu) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float a = SumKSlices<kWarps>(acc, s_red, 0, nt, i, lane);
            const float b = SumKSlices<kWarps>(acc, s_red, 1, nt, i, lane);
            const int64_t c = n0 + g + (i < 2 ? 0 : 8), t = t0 + nt * 8 + 2 * q + (i & 1);
            if (c < I && t < rows) out[(row0 + t) * p.ldo + c] = dev::FromF<TOut>(a / (1.0f + expf(-a)) * b);
          }
      } else {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float v = SumKSlices<kWarps>(acc, s_red, mt, nt, i, lane);
              const int64_t n = n0 + kTileM * mt + g + (i < 2 ? 0 : 8), t = t0 + nt * 8 + 2 * q + (i & 1);
              if (n < N && t < rows) out[(row0 + t) * p.ldo + n] = dev::FromF<TOut>(v);
            }
      }
    }
    __syncthreads();
  }
  if constexpr (kCombine) CountOutAndCombine(*epi);
}

template <bool kFp8, int kNT, typename TOut, int kWarps, int kMT, int kMinBlocks, int kUDiv>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) SkinnyGemmKernel(GroupedGemmParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  SkinnyGemmBody<kFp8, kNT, TOut, kWarps, kMT, kMinBlocks, kUDiv, false>(p, nullptr);
}

// The plain kernel with SiLU-and-mul of gate / up row pairs in its epilogue
// (SkinnyGemmParams::silu_pair).
template <bool kFp8, int kNT, typename TOut, int kWarps, int kMT, int kMinBlocks, int kUDiv>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) SkinnyGemmSiluKernel(GroupedGemmParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  if constexpr (kMT == 2) SkinnyGemmBody<kFp8, kNT, TOut, kWarps, kMT, kMinBlocks, kUDiv, false, true>(p, nullptr);
}

// The plain kernel with the combine epilogue (SkinnyCombineEpilogue, skinny_gemm.h).
template <bool kFp8, int kNT, typename TOut, int kWarps, int kMT, int kMinBlocks, int kUDiv>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    SkinnyGemmCombineKernel(GroupedGemmParams p, const SkinnyCombineEpilogue epi) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  SkinnyGemmBody<kFp8, kNT, TOut, kWarps, kMT, kMinBlocks, kUDiv, true>(p, &epi);
}


// The general form (same mapping and math): blockIdx.z = K split (chunks [z * cps, min(nchunks,
// (z + 1) * cps)), partials + last-block reduction when splits > 1) and per-group strides of
// a / w / out (batched form). A separate kernel, so that the plain one above keeps its code:
// with the general form's extra registers the register-capped 32-row variants ran 6-33% slower
// on the H200 (splitk_2026-11-29.md).
template <bool kFp8, int kNT, typename TOut, int kWarps, int kMT, int kMinBlocks, int kUDiv>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) SkinnyGemmKernelGen(KArgs ka) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const GroupedGemmParams& p = ka.p;
  constexpr int kThreads = kWarps * 32;
  constexpr int kTileN = kTileM * kMT;       // weight rows per block
  constexpr int kEs = kFp8 ? 1 : 2;          // weight element bytes
  constexpr int kEpl = 16 / kEs;             // weight elements per lane load (16 fp8 / 8 bf16)
  constexpr int kChunkK = 4 * kEpl;          // k per chunk
  constexpr int kSteps = kEpl / 4;           // k16 mma steps per chunk
  constexpr int kAv = kEpl / 8;              // 16-byte activation loads per lane, chunk, 8 rows
  // chunks per warp iteration: ~8 weight loads per lane in flight
  constexpr int kU = std::max(1, ((kFp8 && kNT == 2) ? 2 : 4) / (kMT * kUDiv));

  __shared__ int s_group;
  __shared__ bool s_last;
  __shared__ int s_cnt[kWarps];
  __shared__ float s_red[kWarps - 1][kMT][kNT][4][32];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  int64_t e = 0, row0 = 0, rows = p.max_rows;
  if (p.offsets == nullptr) {
    e = blockIdx.y;  // batched form: every group has max_rows rows
  } else {
    const int64_t E = p.num_experts;
    if (static_cast<int64_t>(gridDim.y) == E) {
      e = blockIdx.y;
    } else {  // the blockIdx.y-th non-empty group
      const int j = static_cast<int>(blockIdx.y);
      if (tid == 0) s_group = -1;
      int seen = 0;
      for (int64_t b = 0; b < E; b += kThreads) {
        const int64_t ee = b + tid;
        const bool f = ee < E && p.offsets[ee + 1] > p.offsets[ee];
        const unsigned m = __ballot_sync(0xffffffffu, f);
        __syncthreads();
        if (lane == 0) s_cnt[warp] = __popc(m);
        __syncthreads();
        int before = seen, total = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          const int c = s_cnt[w];
          if (w < warp) before += c;
          total += c;
        }
        if (f && before + __popc(m & ((1u << lane) - 1u)) == j) s_group = static_cast<int>(ee);
        seen += total;
        if (seen > j) break;
      }
      __syncthreads();
      if (s_group < 0) return;
      e = s_group;
    }
    row0 = p.offsets[e];
    rows = p.offsets[e + 1] - row0;
    if (rows <= 0) return;
  }

  const int64_t N = p.N, K = p.K;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  // Rows of m-tile mt held by this lane: n0 + 16 mt + g (A) and + 8 (B).
  const uint8_t* wA[kMT];
  const uint8_t* wB[kMT];
  bool okA[kMT], okB[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int64_t nA = n0 + kTileM * mt + g, nB = nA + 8;
    okA[mt] = nA < N;
    okB[mt] = nB < N;
    wA[mt] = static_cast<const uint8_t*>(p.w) + (e * ka.gw + nA * K) * kEs;
    wB[mt] = static_cast<const uint8_t*>(p.w) + (e * ka.gw + nB * K) * kEs;
  }
  const bool vec = (K * kEs) % 16 == 0 && (ka.gw * kEs) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0 &&
                   p.lda % 8 == 0 && ka.ga % 8 == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0;
  const int64_t nchunks = (K + kChunkK - 1) / kChunkK;
  const int split = static_cast<int>(blockIdx.z);
  const int64_t c_begin = split * ka.cps, c_end = std::min(nchunks, c_begin + ka.cps);
  const __nv_bfloat16* a_base = p.a + e * ka.ga;
  // Split-K partial rows of this group: ws[split, wrow0 + t, n].
  const int64_t wrow0 = p.offsets == nullptr ? e * p.max_rows : row0;
  const int64_t kb_count = (K + 127) / 128, nb_count = (N + 127) / 128;
  // FP8 block scales of each m-tile's 128-row block (16-row tiles never straddle one).
  const float* srow[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    srow[mt] = nullptr;
    if constexpr (kFp8) srow[mt] = p.w_scales + (e * nb_count + std::min(n0 + kTileM * mt, N - 1) / 128) * kb_count;
  }

  for (int64_t t0 = 0; t0 < rows; t0 += 8 * kNT) {
    float acc[kMT][kNT][4];
    const __nv_bfloat16* arow[kNT];
    bool aok[kNT];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int64_t t = t0 + nt * 8 + g;
      aok[nt] = t < rows;
      const int64_t ar = p.a_rows == nullptr ? row0 + t : aok[nt] ? int64_t{p.a_rows[row0 + t]} : 0;
      arow[nt] = a_base + ar * p.lda;
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
    for (int64_t c0 = c_begin + static_cast<int64_t>(warp) * kU; c0 < c_end; c0 += kWarps * kU) {
      uint4 wa[kMT][kU], wb[kMT][kU], av[kU][kNT][kAv];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t kl = (c0 + u) * kChunkK + q * kEpl;
        const bool cin = c0 + u < c_end;  // no loads past this split's chunks
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          wa[mt][u] = LoadW<kEs>(wA[mt], okA[mt] && cin, kl, K, vec);
          wb[mt][u] = LoadW<kEs>(wB[mt], okB[mt] && cin, kl, K, vec);
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int v = 0; v < kAv; ++v) av[u][nt][v] = LoadA(arow[nt], aok[nt] && cin, kl + 8 * v, K, vec);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (c0 + u >= c_end) break;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          if constexpr (kFp8) {
            float t[kNT][4];
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) t[nt][i] = 0.f;
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
              const uint32_t xa = Word(wa[mt][u], s), xb = Word(wb[mt][u], s);
              const uint32_t a0 = E4M3x2ToBf16x2(xa, 0x4140), a2 = E4M3x2ToBf16x2(xa, 0x4342);
              const uint32_t a1 = E4M3x2ToBf16x2(xb, 0x4140), a3 = E4M3x2ToBf16x2(xb, 0x4342);
#pragma unroll
              for (int nt = 0; nt < kNT; ++nt) {
                const uint4& bv = av[u][nt][s / 2];
                Mma(t[nt], a0, a1, a2, a3, Word(bv, (s % 2) * 2), Word(bv, (s % 2) * 2 + 1));
              }
            }
            const float sc = __ldg(srow[mt] + (c0 + u) * kChunkK / 128);
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[mt][nt][i] = fmaf(sc, t[nt][i], acc[mt][nt][i]);
          } else {
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
              const uint32_t a0 = Word(wa[mt][u], 2 * s), a2 = Word(wa[mt][u], 2 * s + 1);
              const uint32_t a1 = Word(wb[mt][u], 2 * s), a3 = Word(wb[mt][u], 2 * s + 1);
#pragma unroll
              for (int nt = 0; nt < kNT; ++nt) {
                const uint4& bv = av[u][nt][0];
                Mma(acc[mt][nt], a0, a1, a2, a3, Word(bv, 2 * s), Word(bv, 2 * s + 1));
              }
            }
          }
        }
      }
    }
    // Sum the warps' K slices; warp 0 writes. C fragment: c0, c1 = (row n0 + 16 mt + g, rows
    // t 2q, 2q+1), c2, c3 = (row + 8, same t).
    if (warp > 0) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) s_red[warp - 1][mt][nt][i][lane] = acc[mt][nt][i];
    }
    __syncthreads();
    if (warp == 0) {
      TOut* out = static_cast<TOut*>(p.out) + e * ka.go;
      float* ws = ka.splits > 1 ? ka.ws + (split * ka.ws_rows + wrow0) * N : nullptr;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float v = SumKSlices<kWarps>(acc, s_red, mt, nt, i, lane);
            const int64_t n = n0 + kTileM * mt + g + (i < 2 ? 0 : 8), t = t0 + nt * 8 + 2 * q + (i & 1);
            if (n < N && t < rows) {
              if (ka.splits > 1) ws[t * N + n] = v;
              else out[(row0 + t) * p.ldo + n] = dev::FromF<TOut>(v);
            }
          }
    }
    __syncthreads();
  }
  if (ka.splits <= 1) return;
  // Split-K: the last block of this tile to arrive sums the partials in split order.
  __threadfence();
  __syncthreads();
  uint32_t* counter = ka.counters + blockIdx.y * gridDim.x + blockIdx.x;
  if (tid == 0) s_last = atomicAdd(counter, 1u) == static_cast<uint32_t>(ka.splits - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  TOut* out = static_cast<TOut*>(p.out) + e * ka.go;
  const float* ws = ka.ws + wrow0 * N;
  const int64_t split_stride = ka.ws_rows * N;
  for (int64_t idx = tid; idx < rows * kTileN; idx += kThreads) {
    const int64_t t = idx / kTileN, n = n0 + idx % kTileN;
    if (n >= N) continue;
    float v = 0.f;
    for (int s = 0; s < ka.splits; ++s) v += __ldcg(ws + s * split_stride + t * N + n);
    out[(row0 + t) * p.ldo + n] = dev::FromF<TOut>(v);
  }
  if (tid == 0) *counter = 0u;  // every split has arrived: ready for the next launch / replay
}

// Variants: warps per block (splitting K), 16-row m-tiles per warp, min resident blocks per SM
// (register cap, so that every tile of a decode-size GEMM is resident in one wave).
// min_blocks 0 = no cap; u_div divides the chunks in flight per warp (register pressure).
struct Variant { int warps, mt, min_blocks, u_div; };
constexpr Variant kVariants[kSkinnyVariants] = {{4, 1, 0, 1}, {8, 1, 0, 1}, {4, 2, 0, 1}, {4, 2, 8, 2}, {8, 2, 3, 2}};

template <bool kFp8, int kNT, typename TOut, int kV>
void LaunchV(const KArgs& a, const SkinnyCombineEpilogue& epi, int64_t slots, bool gen) {
  constexpr Variant v = kVariants[kV];
  const dim3 grid(dev::CeilDiv(a.p.N, kTileM * v.mt), static_cast<unsigned>(slots), static_cast<unsigned>(a.splits));
  if (gen) {
    DS_CHECK(!a.silu) << "SkinnyGemm: the SiLU pair needs the plain kernel";
    LaunchKernel(SkinnyGemmKernelGen<kFp8, kNT, TOut, v.warps, v.mt, v.min_blocks, v.u_div>, grid, v.warps * 32, 0,
                 a.p.stream, a.p.pdl, a);
  } else if constexpr (kNT == 1) {
    if (a.silu) {
      if constexpr (v.mt == 2 && std::is_same_v<TOut, __nv_bfloat16>)
        LaunchKernel(SkinnyGemmSiluKernel<kFp8, kNT, TOut, v.warps, v.mt, v.min_blocks, v.u_div>, grid, v.warps * 32, 0,
                     a.p.stream, a.p.pdl, a.p);
      else
        DS_CHECK(false) << "SkinnyGemm: the SiLU pair needs a two-tile variant and bf16 output";
    } else if (epi.counter != nullptr)
      LaunchKernel(SkinnyGemmCombineKernel<kFp8, kNT, TOut, v.warps, v.mt, v.min_blocks, v.u_div>, grid, v.warps * 32,
                   0, a.p.stream, a.p.pdl, a.p, epi);
    else
      LaunchKernel(SkinnyGemmKernel<kFp8, kNT, TOut, v.warps, v.mt, v.min_blocks, v.u_div>, grid, v.warps * 32, 0,
                   a.p.stream, a.p.pdl, a.p);
  } else {
    DS_CHECK(epi.counter == nullptr && !a.silu) << "SkinnyGemm: the combine and SiLU epilogues need <= 8 rows a group";
    LaunchKernel(SkinnyGemmKernel<kFp8, kNT, TOut, v.warps, v.mt, v.min_blocks, v.u_div>, grid, v.warps * 32, 0,
                 a.p.stream, a.p.pdl, a.p);
  }
}

template <bool kFp8, int kNT, typename TOut>
void Launch(const KArgs& a, const SkinnyCombineEpilogue& epi, int64_t slots, int v, bool gen) {
  switch (v) {
    case 0: LaunchV<kFp8, kNT, TOut, 0>(a, epi, slots, gen); break;
    case 1: LaunchV<kFp8, kNT, TOut, 1>(a, epi, slots, gen); break;
    case 2: LaunchV<kFp8, kNT, TOut, 2>(a, epi, slots, gen); break;
    case 3: LaunchV<kFp8, kNT, TOut, 3>(a, epi, slots, gen); break;
    default: LaunchV<kFp8, kNT, TOut, 4>(a, epi, slots, gen); break;
  }
}

template <bool kFp8, int kNT>
void Launch(const KArgs& a, const SkinnyCombineEpilogue& epi, int64_t slots, int v, bool gen) {
  if (a.p.out_type == DTypeOut::kF32) Launch<kFp8, kNT, float>(a, epi, slots, v, gen);
  else Launch<kFp8, kNT, __nv_bfloat16>(a, epi, slots, v, gen);
}

// Chunks one warp iteration covers (kWarps x kU at <= 8 rows per pass), the split unit.
int64_t ChunksPerIteration(int v) {
  const Variant& vv = kVariants[v];
  return int64_t{vv.warps} * std::max(1, 4 / (vv.mt * vv.u_div));
}

int SmCount() { return std::max(1, CurrentDeviceProps().sms); }

// Whether the plan splits K on its own: SkinnySplitKWins (host_plans.h, with the measurements).

int64_t Slots(const SkinnyGemmParams& sp) {
  const GroupedGemmParams& p = sp.g;
  if (p.offsets == nullptr) return p.num_experts;
  return sp.max_active_groups > 0 ? std::min(sp.max_active_groups, p.num_experts) : p.num_experts;
}

// The general kernel only where needed: K split, or several groups without offsets, or strides
// other than the contiguous [E, N, K] layout.
bool UsesGenKernel(const SkinnyGemmParams& sp, const SkinnyPlan& plan) {
  const GroupedGemmParams& p = sp.g;
  return plan.splits > 1 || (p.offsets == nullptr && p.num_experts > 1) || sp.group_stride_a != 0 ||
         sp.group_stride_out != 0 || (sp.group_stride_w >= 0 && sp.group_stride_w != p.N * p.K);
}

}  // namespace

bool SkinnySiluFits(const SkinnyGemmParams& sp) {
  const GroupedGemmParams& p = sp.g;
  if (p.N <= 0 || p.K <= 0 || p.num_experts <= 0 || p.N % 32 != 0 || p.max_rows < 0 ||
      sp.variant >= kSkinnyVariants)
    return false;
  const SkinnyPlan plan = SkinnyPlanFor(sp);
  return !UsesGenKernel(sp, plan) && kVariants[plan.variant].mt == 2 && sp.max_group_rows <= 8 &&
         p.out_type == DTypeOut::kBF16 && sp.combine == nullptr;
}

bool SkinnyCombineFits(const SkinnyGemmParams& sp, int64_t d, int64_t top_k) {
  const GroupedGemmParams& p = sp.g;
  if (p.N <= 0 || p.K <= 0 || p.num_experts <= 0 || p.max_rows < 0 || sp.variant >= kSkinnyVariants) return false;
  const SkinnyPlan plan = SkinnyPlanFor(sp);
  const int threads = kVariants[plan.variant].warps * 32, vt = norm::RmsNormThreads(d);
  const bool out_ok = top_k > 0 ? sp.g.out_type == DTypeOut::kBF16 : sp.g.out_type == DTypeOut::kF32;
  return !UsesGenKernel(sp, plan) && sp.max_group_rows <= 8 && out_ok && d > 0 && top_k >= 0 &&
         top_k <= combine::kMaxSlots && d <= int64_t{8} * threads &&
         vt % threads == 0 && vt / threads <= 8;
}

SkinnyPlan SkinnyPlanFor(const SkinnyGemmParams& sp) {
  const GroupedGemmParams& p = sp.g;
  // The runner sizes the split-K workspace with this before SkinnyGemm checks the shape: an
  // empty shape plans no split (and no workspace) instead of clamping into an empty range.
  DS_CHECK(p.N > 0 && p.K > 0 && p.num_experts > 0) << "SkinnyPlanFor: bad shape N=" << p.N << " K=" << p.K
                                                    << " groups=" << p.num_experts;
  DS_CHECK(p.max_rows >= 0) << "SkinnyPlanFor: max_rows " << p.max_rows;
  const bool fp8 = p.w_fp8;
  const int64_t slots = Slots(sp);
  const int64_t chunk_k = fp8 ? 64 : 32, nchunks = (p.K + chunk_k - 1) / chunk_k;
  SkinnyPlan plan;
  plan.variant = sp.variant >= 0 ? sp.variant : SkinnyAutoVariant(fp8, p.N, p.K, slots, sp.max_group_rows);
  int64_t S = 1;
  const int64_t tiles32 = slots * ((p.N + 31) / 32);
  const int64_t sms = SmCount();
  if (sp.splits > 1) {  // forced (tests, bench sweeps): the split-mode variant unless one is given
    S = sp.splits;
    if (sp.variant < 0) plan.variant = fp8 ? 3 : 2;
  } else if (sp.splits == 0 && SkinnySplitKWins(fp8, p.offsets == nullptr && p.num_experts == 1, p.N, p.K,
                                          sp.max_group_rows, tiles32, sms)) {
    // Narrow weights: 32-row tiles capped at 8 resident blocks per SM, about one wave of them,
    // each split at least one warp iteration of K.
    if (sp.variant < 0) plan.variant = 3;
    const int64_t unit = ChunksPerIteration(plan.variant);
    S = std::min<int64_t>({kMaxSplits, (8 * sms) / tiles32, (nchunks + unit - 1) / unit});
  }
  S = std::clamp<int64_t>(S, 1, std::min<int64_t>(kMaxSplits, nchunks));
  const int64_t cps = (nchunks + S - 1) / S;
  S = (nchunks + cps - 1) / cps;
  plan.splits = static_cast<int>(S);
  plan.chunks_per_split = cps;
  if (S > 1) {
    const int64_t tile_n = kTileM * kVariants[plan.variant].mt;
    const int64_t ws_rows = p.offsets == nullptr ? slots * p.max_rows : p.max_rows;
    plan.ws_floats = S * ws_rows * p.N;
    plan.counters = slots * ((p.N + tile_n - 1) / tile_n);
  }
  return plan;
}

int SkinnyAutoVariant(bool fp8, int64_t N, int64_t K, int64_t slots, int64_t max_group_rows) {
  (void)K; (void)max_group_rows;
  // From the H200 sweep of every variant (bench/results/skinny_gemm_2026-11-29.md), by the
  // number of 32-row tiles in the grid: many (MoE experts, q_b_proj) -> 32-row tiles, FP8 with
  // the register cap that keeps all of a decode-size grid resident (variant 3: V3 experts
  // 0.81-0.83 of the copy ceiling); a few hundred (o_proj, shared_down) -> 8 warps x 32 rows
  // (variant 4); fewer (q_a / kv_a / shared gate_up, small bf16) -> 16-row tiles with 8 warps
  // splitting K (variant 1).
  const int64_t tiles32 = slots * ((N + 31) / 32);
  if (tiles32 >= 512) return fp8 ? 3 : 2;
  if (tiles32 >= 192) return 4;
  return 1;
}

void SkinnyGemm(const SkinnyGemmParams& sp) {
  const GroupedGemmParams& p = sp.g;
  DS_CHECK(p.N > 0 && p.K > 0 && p.num_experts > 0) << "SkinnyGemm: bad shape N=" << p.N << " K=" << p.K;
  DS_CHECK(!p.w_fp8 || p.w_scales) << "SkinnyGemm: FP8 weights need w_scales";
  DS_CHECK(p.max_rows >= 0) << "SkinnyGemm: max_rows " << p.max_rows;
  DS_CHECK(sp.combine == nullptr || p.max_rows > 0) << "SkinnyGemm: the combine epilogue needs rows";
  if (p.max_rows == 0) return;
  const int64_t slots = Slots(sp);
  DS_CHECK(slots < 65536) << "SkinnyGemm: too many groups " << slots;
  DS_CHECK(sp.variant < kSkinnyVariants) << "SkinnyGemm: no variant " << sp.variant;
  SkinnyPlan plan = SkinnyPlanFor(sp);
  if (plan.splits > 1 && (sp.splitk_ws == nullptr || sp.splitk_ws_floats < plan.ws_floats ||
                          sp.splitk_counters == nullptr || sp.splitk_counter_count < plan.counters)) {
    SkinnyGemmParams unsplit = sp;  // no (or too small a) workspace: run unsplit
    unsplit.splits = 1;
    plan = SkinnyPlanFor(unsplit);
  }
  KArgs a{p, sp.group_stride_a, sp.group_stride_w >= 0 ? sp.group_stride_w : p.N * p.K, sp.group_stride_out,
          plan.chunks_per_split, plan.splits, sp.splitk_ws, sp.splitk_counters,
          p.offsets == nullptr ? slots * p.max_rows : p.max_rows};
  const int v = plan.variant;
  const bool nt2 = sp.max_group_rows > 8;
  if (sp.silu_pair) {
    DS_CHECK(SkinnySiluFits(sp)) << "SkinnyGemm: the SiLU pair needs the plain kernel (no K split) on a two-tile "
                                    "variant, <= 8 rows a group, N a multiple of 32, bf16 output and no combine "
                                    "(N=" << p.N << ", variant " << v << ", splits " << plan.splits << ")";
    a.silu = true;
  }
  // The general kernel only where needed: K split, or several groups without offsets, or
  // strides other than the contiguous [E, N, K] layout.
  const bool gen = UsesGenKernel(sp, plan);
  const SkinnyCombineEpilogue epi = sp.combine != nullptr ? *sp.combine : SkinnyCombineEpilogue{};
  if (sp.combine != nullptr) {
    const MoeCombineNormParams& cn = epi.cn;
    const int threads = kVariants[v].warps * 32, vt = norm::RmsNormThreads(cn.d);
    // Routed rows: the GEMM's bf16 output is y. Norm only (top_k 0): its fp32 output is the base.
    const bool routed =
        cn.top_k > 0 && cn.y == p.out && cn.ldy == p.ldo && cn.y_bf16 && p.out_type == DTypeOut::kBF16;
    const bool norm_only = cn.top_k == 0 && cn.base == p.out && cn.ld_base == p.ldo && p.out_type == DTypeOut::kF32;
    DS_CHECK(!gen && !nt2 && epi.counter != nullptr && (routed || norm_only) &&
             cn.n >= 1 && cn.d > 0 && cn.d <= int64_t{8} * threads && vt % threads == 0 && vt / threads <= 8 &&
             cn.top_k >= 0 && cn.top_k <= combine::kMaxSlots && (!cn.residual || (cn.norm_weight && cn.out)) &&
             (cn.residual || cn.moe_out) && cn.num_shared == 0)
        << "SkinnyGemm: the combine epilogue needs the unsplit kernel at <= 8 rows a group, a counter, the GEMM's "
           "bf16 output as y (or, with top_k 0, its fp32 output as the base), >= 1 token, no shared groups, and the "
           "norm's block size a multiple of (at most 8 times) the variant's "
        << threads << " threads";
  }
  if (p.w_fp8) {
    if (nt2) Launch<true, 2>(a, epi, slots, v, gen); else Launch<true, 1>(a, epi, slots, v, gen);
  } else {
    if (nt2) Launch<false, 2>(a, epi, slots, v, gen); else Launch<false, 1>(a, epi, slots, v, gen);
  }
  DS_CUDA_CHECK_LAUNCH("SkinnyGemmKernel");
}

}  // namespace ds::cuda
