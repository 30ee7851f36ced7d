// MoE combine fused with the residual add and the next RMSNorm, for decode-size batches (one
// launch instead of MoeCombine + RmsNorm). Verified on the H200 (session 4): bit-identical to the
// unfused pair; the runner's default for passes of <= 16 tokens (CudaRunnerOptions::fused_norm).
//
// Per token t (one block), for each channel i, in this order of fp32 operations:
//   acc  = base[t, i] if base, else 0                        (the unfused shared-expert output)
//   acc += y[row_s(t), i] for s = 0 .. S-1                   (fused shared-expert groups, fp32 y;
//                                                             row_s(t) = shared_row0 + s * n + t)
//   acc += weights[t, j] * y'[pos[t, j], i] for j = 0 .. top_k-1 (pos < 0 skipped), where y' is
//          y as stored (bf16 or fp32), or bf16(y) when round_y_bf16 (fp32 y whose routed rows
//          the unfused path would have stored as bf16)
//   moe_out[t, i] = acc                                      (when moe_out != nullptr)
// then, when residual != nullptr (RmsNorm's fused residual form, rmsnorm.h):
//   v = acc + residual[t, i];  residual[t, i] = v;  out[t, i] = v * rsqrt(mean(v^2) + eps) * w[i]
// with out fp32 and, when out_bf16, also bf16(out).
// With S = 0, round_y_bf16 = false this is MoeCombine (accumulate = base != nullptr) followed by
// RmsNorm({moe_out, residual, ...}) bit for bit: the same expressions, the same block size
// (RmsNorm's: 1024 threads for d >= 1024, else 256) and the same reduction order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

struct MoeCombineNormParams {
  const void* y; bool y_bf16 = false; int64_t ldy;  // [rows, d] expert outputs
  bool round_y_bf16 = false;                         // fp32 y: round routed rows to bf16 first
  const int32_t* pos;                                // [n * top_k]
  const float* weights;                              // [n, top_k]
  int64_t n, top_k, d;
  const float* base = nullptr; int64_t ld_base = 0;  // [n, d] fp32 added first, or nullptr
  int num_shared = 0; int64_t shared_row0 = 0;       // S fused shared groups in y (fp32 y only)
  float* moe_out = nullptr; int64_t ld_moe_out = 0;  // [n, d] the combined output, or nullptr
  float* residual = nullptr; int64_t ldres = 0;      // [n, d] in/out, or nullptr: no norm
  const float* norm_weight = nullptr;                // [d]
  float eps = 1e-6f;
  float* out = nullptr; int64_t ldout = 0;           // [n, d] fp32 normalised
  __nv_bfloat16* out_bf16 = nullptr; int64_t ldout_bf16 = 0;  // [n, d] or nullptr
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way. (Not with split_blocks: a cooperative launch.)
  bool pdl = false;
  // split_blocks G > 1 (session 29; CudaRunnerOptions::combine_norm_split, 8 by default for V3):
  // each token's row over G blocks of VT / G threads (VT = norm::RmsNormThreads(d), the one-block
  // kernel's block size) in one cooperative launch of n x G blocks. Block g plays the one-block
  // kernel's threads g VT / G .. (g + 1) VT / G - 1 with their elements, every load of a thread's
  // elements and routed slots in flight at once (the one-block kernel at 1,024 threads has 64
  // registers a thread: V3's 8 slots go one a round trip), its warps' sums of squares written to
  // split_ss, a grid barrier (grid_barrier.cuh on split_sync), then every block reduces the 32
  // warp sums as BlockSum's last step does: the same fp32 operations in the same order, so the
  // same bits as the one-block kernel. Needs the residual form (residual != nullptr), d <= 8 VT
  // (the staged forms), top_k <= 16, G dividing VT / 32 and VT / G <= 256 (G >= 4 at d >= 1024);
  // else MoeCombineNorm DS_CHECKs. A grid of n x G blocks that does not fit the device at once
  // runs the one-block kernel instead (the same bits).
  int split_blocks = 0;
  uint32_t* split_sync = nullptr;   // 2 words (grid_barrier.cuh's counter), zero before the first launch
  float* split_ss = nullptr;        // [n, 32] scratch
};
// Errors: DS_CHECK (CheckError) on bad shapes, a missing output or norm operand, and split_blocks
// params outside the limits above.
void MoeCombineNorm(const MoeCombineNormParams& p);

}  // namespace ds::cuda
