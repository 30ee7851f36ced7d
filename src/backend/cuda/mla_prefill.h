// MLA prefill attention over decompressed K/V (the "naive" MLA form, DeepSeek-V2 paper
// section 2.1.2), the CUDA counterpart of ds::cpu::MlaPrefillAttention, batched over
// sequences: sequence s has queries q_start[s]..q_start[s+1]-1 whose first sits at position
// q_pos0[s], and keys k_start[s]..k_start[s+1]-1 at positions 0.. (its whole context, the
// cached prefix included: chunked prefill). Query i attends keys 0..q_pos0[s]+i (causal).
// Keys are given as two parts, k_nope (channels [0, d_nope)) and k_rope ([d_nope, d_nope +
// d_rope)); a head stride of 0 shares a part across heads (MLA's single rope key).
// Flash-attention style tiling (32 queries x 32 keys, online softmax), fp32 math.
// Limits: d_nope + d_rope <= 256, dv <= 128.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm.h"

namespace ds::cuda {

struct MlaPrefillParams {
  const float* q; int64_t q_tok_stride, q_head_stride;        // [Tq, H, d_nope + d_rope]
  const float* k_nope; int64_t kn_tok_stride, kn_head_stride; // [Tk, H, d_nope]
  const float* k_rope; int64_t kr_tok_stride, kr_head_stride; // [Tk, (H,) d_rope]
  const float* v; int64_t v_tok_stride, v_head_stride;        // [Tk, H, dv]
  void* out; int64_t o_tok_stride, o_head_stride;             // [Tq, H, dv]
  DTypeOut out_type = DTypeOut::kF32;
  int64_t num_seqs, heads, d_nope, d_rope, dv;
  const int32_t* q_start;  // [S + 1] device
  const int32_t* k_start;  // [S + 1] device
  const int32_t* q_pos0;   // [S] device
  int64_t max_q_len;       // >= every sequence's query count (bounds the grid)
  float softmax_scale;
  cudaStream_t stream = nullptr;
};
void MlaPrefillAttention(const MlaPrefillParams& p);

// The same attention on tensor cores (mla_prefill_tc.cu), flash-attention-2 style: bf16
// operands (q rounded from fp32 while loading; k_nope, k_rope and v given in bf16), fp32
// accumulation and online softmax (exp2, scale folded in). Blocks of block_q queries (64: 4
// warps, 128: 8 warps, 16 query rows per warp) x 64 keys, K/V tiles double-buffered in shared
// memory with cp.async. Specialised for d_nope 128, d_rope 64, dv 128 (DeepSeek-V2/V2-Lite/V3);
// MlaPrefillTcSupported says whether a call qualifies. Sequence layout, causality and
// head-sharing of k_rope exactly as MlaPrefillParams.
// Alignment: every pointer 16-byte aligned; bf16 token/head strides multiples of 8 elements,
// q strides multiples of 4 floats, out strides even. Errors: DS_CHECK on unsupported dims,
// misalignment or an oversized grid.
struct MlaPrefillTcParams {
  const float* q; int64_t q_tok_stride, q_head_stride;                 // [Tq, H, 192] fp32
  const __nv_bfloat16* k_nope; int64_t kn_tok_stride, kn_head_stride;  // [Tk, H, 128] bf16
  const __nv_bfloat16* k_rope; int64_t kr_tok_stride, kr_head_stride;  // [Tk, (H,) 64] bf16
  const __nv_bfloat16* v; int64_t v_tok_stride, v_head_stride;         // [Tk, H, 128] bf16
  void* out; int64_t o_tok_stride, o_head_stride;                      // [Tq, H, 128]
  DTypeOut out_type = DTypeOut::kF32;
  int64_t num_seqs, heads, d_nope, d_rope, dv;
  const int32_t* q_start;  // [S + 1] device
  const int32_t* k_start;  // [S + 1] device
  const int32_t* q_pos0;   // [S] device
  int64_t max_q_len;
  float softmax_scale;
  int block_q = 0;  // queries per block: 64 or 128; 0 = default (64)
  cudaStream_t stream = nullptr;
  // For the sm_90a kernel (below): total key rows of the k_nope / k_rope / v buffers (=
  // k_start[S], known on the host), which bounds its TMA descriptors; 0 = unknown.
  int64_t total_k = 0;
  // Route MlaPrefillAttentionTc to the sm_90a kernel where MlaPrefillSm90Supported(*this)
  // (the runner sets it from CudaRunnerOptions::mla_prefill_sm90); otherwise the mma.sync kernel.
  bool sm90 = false;
  // sm_90a kernel variant: the two consumer warpgroups take turns issuing their GEMMs
  // (FlashAttention-3's ping-pong); off until measured on the GPU.
  bool sm90_pingpong = false;
};
bool MlaPrefillTcSupported(int64_t d_nope, int64_t d_rope, int64_t dv);
void MlaPrefillAttentionTc(const MlaPrefillTcParams& p);

// The same attention as MlaPrefillAttentionTc, same numerics (bf16 q/k/v/P, fp32 accumulation
// and online softmax), as a FlashAttention-3-style Hopper kernel (mla_prefill_sm90.cu): a
// producer warp streams 128-key K/V tiles by TMA into a two-stage mbarrier ring, two consumer
// warpgroups (64 query rows each, 128 per block) run S = Q K^T and O += P V on wgmma (P from
// registers), softmax overlapped with the previous tile's P V. block_q is ignored.
// Supported (MlaPrefillSm90Supported) when: built for sm_90a, the current device is compute
// capability 9.0, dims nope 128 / rope 64 / v 128, total_k > 0 and < 2^31, every k/v pointer
// 16-byte aligned with token/head strides multiples of 8 elements (k_rope head stride 0 or a
// multiple of 8), q and out as MlaPrefillAttentionTc. MlaPrefillAttentionSm90 DS_CHECKs the same.
// Verified on the H200 (session 3 runs 3-4; docs/design/cuda_backend.md).
bool MlaPrefillSm90Supported(const MlaPrefillTcParams& p);
void MlaPrefillAttentionSm90(const MlaPrefillTcParams& p);
// Debug aid for the first GPU runs: true (and reset) if a launch of the sm_90a kernel gave up
// waiting on one of its pipeline barriers (a deadlock: a bug) since the last call; that
// launch's output is garbage. Synchronous (reads a device flag).
bool MlaPrefillSm90WatchdogFired();

}  // namespace ds::cuda
