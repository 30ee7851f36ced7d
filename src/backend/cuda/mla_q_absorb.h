// MLA's query absorption for decode-size passes (CudaRunnerOptions::fused_q_absorb): for each
// token t and head h,
//   q_lat[t, h, c] = sum_d bf16(q[t, h, d]) * W_UK_h[c, d]      (c < kv_lora, d < nope)
// the absorbed-MLA identity q_nope . k_nope = (q_nope W_UK) . c_kv (DeepSeek-V2 paper section
// 2.1.2; transformers' DeepseekV2Attention splits kv_b_proj into W_UK / W_UV the same way). It
// replaces the runner's SplitBf16 (fp32 q -> bf16) + batched bf16 GEMM (HeadGemm) pair: one
// launch reading the fp32 q rows directly, rounding them to bf16 as SplitBf16 does
// (__float2bfloat16_rn), the products on the tensor cores (bf16 mma, fp32 accumulate) in this
// kernel's own k order: not the GEMM's bits, bounded by the tests (CudaMlaQAbsorb.*,
// CudaRunnerQAbsorb.*).
//
// Grid (ceil(kv_lora / 128), heads), 256 threads: warp w of block (x, h) computes the 16 rows
// c in [128 x + 16 w, + 16) of head h for all tokens (the mma's 8 B columns are the tokens:
// "swap AB", weights as the 16-row operand, as SkinnyGemm).
// Supported (MlaQAbsorbUnsupported says why not): 1 <= tokens <= 8, nope a multiple of 32 and
// at most 256, kv_lora a multiple of 16, 16-byte aligned weights.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace ds::cuda {

struct MlaQAbsorbParams {
  const float* q = nullptr;               // q_nope of token t, head h at q + t * q_tok_stride + h * q_head_stride
  int64_t q_tok_stride = 0, q_head_stride = 0;
  const __nv_bfloat16* w_uk_t = nullptr;  // [heads, kv_lora, nope] bf16 (W_UK_h^T: row c holds W_UK_h[:, c])
  int64_t tokens = 0, heads = 0, nope = 0, kv_lora = 0;
  float* out = nullptr;                   // q_lat[t, h, c] at out + t * out_tok_stride + h * out_head_stride + c
  int64_t out_tok_stride = 0, out_head_stride = 0;
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch (launch.cuh)
};

// Empty when MlaQAbsorb(p) runs p, else the reason.
std::string MlaQAbsorbUnsupported(const MlaQAbsorbParams& p);

// Launches it on p.stream. DS_CHECKs MlaQAbsorbUnsupported(p).empty().
void MlaQAbsorb(const MlaQAbsorbParams& p);

}  // namespace ds::cuda
