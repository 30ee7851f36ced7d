// RoPE (YaRN tables from ds::cpu::ComputeRopeTables), the CUDA counterpart of ds::cpu::ApplyRope,
// plus the fused "rope the new keys and write the paged latent cache" step of MLA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

// In-place rotation of `rope_dim` channels at x + offset of each head (fp32), exactly
// ds::cpu::RopeParams: interleave=true reads pairs (x0,x1),(x2,x3).. and writes the rotated
// evens to the first half and odds to the second half (transformers
// apply_rotary_pos_emb_interleave); false rotates (i, i + rope_dim/2) pairs.
// cos/sin: device [max_pos, rope_dim/2] fp32. rope_dim <= 256, even. Positions must be
// in [0, max_pos) (rows with an out-of-range position are left untouched).
struct RopeParams {
  float* x;
  int64_t n, heads;
  int64_t token_stride, head_stride, offset, rope_dim;
  const int32_t* positions;  // [n] device
  const float* cos; const float* sin;
  int64_t max_pos;
  bool interleave;
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way.
  bool pdl = false;
  // Optional: also copy each rotated head's rope_dim channels (fp32, the values written in
  // place) to out2 + t * out2_token_stride + h * out2_head_stride (absorbed MLA's q_pe slot of
  // q_lat; replaces a Copy2D launch). Rows with an out-of-range position are not written.
  float* out2 = nullptr;
  int64_t out2_token_stride = 0, out2_head_stride = 0;
};
void ApplyRope(const RopeParams& p);

// MLA cache write: for each new token i, cache[slot[i]] = [latent[i] (kv_lora), rope(k_pe[i])]
// in bf16, where rope() is ApplyRope's rotation at positions[i] (one head). Cache layout
// [num_blocks * block_size, kv_lora + rope_dim] (one layer); slot = block_id * block_size +
// position % block_size. A negative slot skips the token.
struct KvCacheWriteParams {
  const float* latent; int64_t ld_latent;  // [n, kv_lora] (already RMS-normalised)
  const float* k_pe; int64_t ld_k_pe;      // [n, rope_dim] (not yet rotated)
  const int32_t* positions;                // [n]
  const int64_t* slots;                    // [n]
  const float* cos; const float* sin;
  int64_t max_pos;
  int64_t n, kv_lora, rope_dim;
  bool interleave;
  __nv_bfloat16* cache;
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way.
  bool pdl = false;
};
void RopeAndWriteKvCache(const KvCacheWriteParams& p);

}  // namespace ds::cuda
