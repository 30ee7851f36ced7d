// Dense GEMMs through cuBLASLt: y[M, N] = x[M, K] @ w[N, K]^T (torch Linear layout, row-major),
// the CUDA counterparts of ds::cpu::Gemm.
//
// GemmBf16: bf16 operands, fp32 accumulation, bf16 or fp32 output; `accumulate` adds into y.
// GemmFp8: e4m3 operands with DeepSeek-V3 block scales (DeepSeek-V3 tech report section 3.3.2):
//   x scales 1x128 per token group, stored M-major: x_scales[kb * M + m] (kb = k / 128), as
//   FP8 quantisation (fp8_quant.h) writes with ScaleLayout::kGroupMajor;
//   w scales one per 128x128 block, row-major [ceil(N/128), w_scale_ld] with
//   w_scale_ld = round_up(ceil(K/128), 4) (the checkpoint's weight_scale_inv padded to 16 B),
//   y = sum_k (xq * xs) (wq * ws) in fp32, written bf16 or fp32. cuBLASLt
//   CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / BLK128x128_32F (cuBLAS >= 12.9, sm_90).
// Both run on `stream`; they share one cuBLASLt handle and workspace (one stream at a time).
// Errors (unsupported shapes, cuBLAS failures) throw ds::CheckError.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

enum class DTypeOut { kF32, kBF16 };

struct GemmBf16Params {
  const __nv_bfloat16* x; int64_t ldx;  // [M, K]
  const __nv_bfloat16* w; int64_t ldw;  // [N, K]
  void* y; int64_t ldy;                 // [M, N], dtype y_type
  DTypeOut y_type = DTypeOut::kF32;
  int64_t M, N, K;
  bool accumulate = false;
  cudaStream_t stream = nullptr;
};
void GemmBf16(const GemmBf16Params& p);

struct GemmFp8Params {
  const uint8_t* xq; int64_t ldx;  // [M, K] e4m3
  const float* x_scales;           // [ceil(K/128), M] (group-major)
  const uint8_t* wq; int64_t ldw;  // [N, K] e4m3
  const float* w_scales;           // [ceil(N/128), w_scale_ld]
  int64_t w_scale_ld;
  void* y; int64_t ldy;            // [M, N]
  DTypeOut y_type = DTypeOut::kBF16;
  int64_t M, N, K;
  cudaStream_t stream = nullptr;
};
void GemmFp8(const GemmFp8Params& p);

inline int64_t Fp8WeightScaleLd(int64_t K) { return ((K + 127) / 128 + 3) / 4 * 4; }

}  // namespace ds::cuda
