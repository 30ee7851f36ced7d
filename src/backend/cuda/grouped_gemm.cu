#include "backend/cuda/grouped_gemm.h"

#include <mma.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"

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

template <bool kFp8>
void Launch(const GroupedGemmParams& p, dim3 grid) {
  if (p.out_type == DTypeOut::kF32) GroupedGemmKernel<kFp8, float><<<grid, 128, 0, p.stream>>>(p);
  else GroupedGemmKernel<kFp8, __nv_bfloat16><<<grid, 128, 0, p.stream>>>(p);
}

}  // namespace

void GroupedGemm(const GroupedGemmParams& p) {
  DS_CHECK(p.N > 0 && p.K > 0 && p.num_experts > 0) << "GroupedGemm: bad shape N=" << p.N << " K=" << p.K;
  DS_CHECK(!p.w_fp8 || p.w_scales) << "GroupedGemm: FP8 weights need w_scales";
  if (p.max_rows == 0) return;
  DS_CHECK(p.max_rows / BM < 65535) << "GroupedGemm: too many rows " << p.max_rows;
  dim3 grid(dev::CeilDiv(p.N, BN), dev::CeilDiv(p.max_rows, BM));
  if (p.w_fp8) Launch<true>(p, grid); else Launch<false>(p, grid);
  DS_CUDA_CHECK_LAUNCH("GroupedGemmKernel");
}

}  // namespace ds::cuda
