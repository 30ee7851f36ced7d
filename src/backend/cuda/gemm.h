// Dense GEMMs through cuBLASLt: y[M, N] = x[M, K] @ w[N, K]^T (torch Linear layout, row-major),
// the CUDA counterparts of ds::cpu::Gemm.
//
// GemmBf16: bf16 operands, fp32 accumulation, bf16 or fp32 output; `accumulate` adds into y.
// GemmFp8: e4m3 operands with DeepSeek-V3 block scales (DeepSeek-V3 tech report section 3.3.2):
//   x scales 1x128 per token group, stored M-major: x_scales[kb * Mp + m] (kb = k / 128,
//   Mp = Fp8PaddedM(M) = round_up(M, 16): cuBLASLt has no block-scaled kernel for M = 1, so
//   the GEMM runs on Mp rows: xq, x_scales and y must have room for Mp rows; rows >= M of y
//   are garbage), as FP8 quantisation (fp8_quant.h) writes with ScaleLayout::kGroupMajor and
//   scale_ld = Mp;
//   w scales one per 128x128 block, row-major [ceil(N/128), w_scale_ld] with
//   w_scale_ld = round_up(ceil(K/128), 4) (the checkpoint's weight_scale_inv padded to 16 B),
//   y = sum_k (xq * xs) (wq * ws) in fp32, written bf16 or fp32. cuBLASLt
//   CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / BLK128x128_32F (cuBLAS >= 12.9, sm_90).
// All run on `stream` with one cuBLASLt handle per device and, unless the params name their own
// `workspace`, that device's shared 64 MiB workspace (one stream at a time): GEMMs that may run
// concurrently on two streams pass their own workspace of at least kGemmWorkspaceBytes (the
// size the algorithms are chosen for).
// Errors (unsupported shapes, cuBLAS failures) throw ds::CheckError.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

enum class DTypeOut { kF32, kBF16 };

inline constexpr size_t kGemmWorkspaceBytes = size_t{64} << 20;

struct GemmBf16Params {
  const __nv_bfloat16* x; int64_t ldx;  // [M, K]
  const __nv_bfloat16* w; int64_t ldw;  // [N, K]
  void* y; int64_t ldy;                 // [M, N], dtype y_type
  DTypeOut y_type = DTypeOut::kF32;
  int64_t M, N, K;
  bool accumulate = false;
  cudaStream_t stream = nullptr;
  // Strided batch (e.g. one GEMM per attention head): problem b uses x + b * stride_x,
  // w + b * stride_w, y + b * stride_y (elements).
  int64_t batch = 1, stride_x = 0, stride_w = 0, stride_y = 0;
  // nullptr: the device's shared workspace; else >= kGemmWorkspaceBytes of device memory.
  void* workspace = nullptr;
};
void GemmBf16(const GemmBf16Params& p);

// Full-fp32 GEMM (no TF32), same layout: for the MoE router, whose logits decide the experts.
struct GemmF32Params {
  const float* x; int64_t ldx;  // [M, K]
  const float* w; int64_t ldw;  // [N, K]
  float* y; int64_t ldy;        // [M, N]
  int64_t M, N, K;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;  // as GemmBf16Params::workspace
};
void GemmF32(const GemmF32Params& p);

struct GemmFp8Params {
  const uint8_t* xq; int64_t ldx;  // [M, K] e4m3
  const float* x_scales;           // [ceil(K/128), Fp8PaddedM(M)] (group-major)
  const uint8_t* wq; int64_t ldw;  // [N, K] e4m3
  const float* w_scales;           // [ceil(N/128), w_scale_ld]
  int64_t w_scale_ld;
  void* y; int64_t ldy;            // [M, N]
  DTypeOut y_type = DTypeOut::kBF16;
  int64_t M, N, K;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;  // as GemmBf16Params::workspace
};
void GemmFp8(const GemmFp8Params& p);

// Whether cuBLASLt has a block-scaled FP8 kernel for this problem (cached per shape); callers
// fall back to GroupedGemm's in-kernel dequantisation when it has none.
bool GemmFp8Supported(int64_t M, int64_t N, int64_t K, int64_t ldx, int64_t ldw, int64_t ldy, DTypeOut y_type);

inline int64_t Fp8PaddedM(int64_t M) { return (M + 15) / 16 * 16; }
inline int64_t Fp8WeightScaleLd(int64_t K) { return ((K + 127) / 128 + 3) / 4 * 4; }

}  // namespace ds::cuda
