// Grouped expert GEMM for MoE (our own kernel; tensor cores through WMMA bf16 16x16x16, fp32
// accumulation): for each expert e and each permuted row r in [offsets[e], offsets[e+1]):
//   out[r, :] = a[r, :] @ w[e]^T,  w[e]: [N, K] (torch Linear layout).
// Segments must be padded to kGroupedGemmRowAlign rows (moe_permute.h does this), so each
// 64-row tile belongs to one expert. Weights are bf16, or FP8 e4m3 with the checkpoint's
// 128x128 block scales w_scales[e, n / 128, k / 128] (dequantised to bf16 tile by tile in
// shared memory; activations stay bf16, so no activation quantisation error is added).
// The expert offsets stay on the device: no host synchronisation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm.h"

namespace ds::cuda {

inline constexpr int kGroupedGemmRowAlign = 64;

struct GroupedGemmParams {
  const __nv_bfloat16* a; int64_t lda;  // [rows, K]
  const int32_t* offsets;               // [E + 1] device
  int64_t max_rows;                     // rows allocated (bounds the grid)
  const void* w; bool w_fp8 = false;    // [E, N, K]
  const float* w_scales = nullptr;      // fp8: [E, ceil(N/128), ceil(K/128)]
  int64_t num_experts, N, K;
  void* out; DTypeOut out_type = DTypeOut::kBF16; int64_t ldo;  // [rows, N]
  cudaStream_t stream = nullptr;
};
void GroupedGemm(const GroupedGemmParams& p);

}  // namespace ds::cuda
