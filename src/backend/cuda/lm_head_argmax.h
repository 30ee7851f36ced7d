// The LM head of one row fused with its greedy argmax (batch-1 decode; CudaRunnerOptions::
// lm_head_argmax): logits = W x and id = argmax(logits) in one launch, so the graph has no separate
// argmax kernel reading the logits back.
//
// Math: logits[n] = sum_k W[n, k] x[k], W [N, K] bf16 row-major, x [K] bf16, fp32 accumulation on
// the tensor cores (mma m16n8k16, the weights as the 16-row operand: gemv_ptx.cuh's
// WarpTile16Cols). A 16-row tile of W is split over K into 8 parts, one a warp of a block (the
// MoE kernel's gu_ksplit 8 schedule); the parts' sums are added in part order 0..7, so each
// logit depends only on (W, x), not on the grid. id: the largest logit, the lowest index on ties,
// NaN never chosen, 0 when every logit is NaN (ds::cpu::Sample's greedy rule, as sampling.cu's
// ArgmaxKernel). Each block reduces its logits' (value, index) pairs, writes them to the workspace
// and counts itself in `counter`; the last block reduces the partials, writes `out_id` and resets
// the counter (zero before the first call; left zero).
//
// With in_residual (CudaRunnerOptions::lm_head_norm, session 31), x is not read: every block first
// computes the final norm itself, x = bf16(v * inv * norm_w) with inv = rsqrt(sum(v^2) / K + eps)
// over v = in_residual (fp32; RmsNorm's per-element operations, transformers' DeepseekV2RMSNorm /
// DeepseekV3RMSNorm, the sum of squares in the block's own order: the same x in every block), so
// the last MoE layer's kernel needs no norm phase of its own (the persistent attention kernel's
// in_residual, session 14, does the same for the layers' input norms).
//
// Errors: LmHeadArgmaxSupported says why a shape cannot run (K % 256, K <= 16,384, N % 16, at most
// 40 tiles of 16 rows a block: N <= 640 x 2 x SMs); LmHeadArgmax DS_CHECKs the same, and the
// pointers (x, or in_residual with norm_w, both 16-byte aligned; K <= 8,192 then).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace ds::cuda {

struct LmHeadArgmaxParams {
  const __nv_bfloat16* x = nullptr;  // [K] device (unused with in_residual)
  // Or: the final norm in every block (above): the residual stream [K] fp32, the norm's weight
  // [K] fp32 (model.norm.weight) and its epsilon.
  const float* in_residual = nullptr;
  const float* norm_w = nullptr;
  float eps = 1e-6f;
  const __nv_bfloat16* w = nullptr;  // [N, K] device, row-major
  int64_t n = 0, k = 0;
  float* logits = nullptr;  // [N] device fp32
  int32_t* out_id = nullptr;  // [1] device
  // Workspace (LmHeadArgmaxWorkspaceBytes(): partial values and indices, one a block) and the
  // arrival counter (one uint32, zero before the first call).
  void* ws = nullptr;
  uint32_t* counter = nullptr;
  cudaStream_t stream = nullptr;
};

// Bytes of LmHeadArgmaxParams::ws on the current device.
size_t LmHeadArgmaxWorkspaceBytes();
// "" when (n, k) can run on the current device, else the reason.
std::string LmHeadArgmaxSupported(int64_t n, int64_t k);
// Whether the in_residual form (the final norm in the kernel) takes K: K <= 8,192 (every
// DeepSeek-V2 / V3-family hidden size), on top of LmHeadArgmaxSupported.
bool LmHeadArgmaxNormSupported(int64_t k);
void LmHeadArgmax(const LmHeadArgmaxParams& p);

}  // namespace ds::cuda
