// The small-batch decode fusion of MLA's kv-latent norm, q RoPE and k_pe RoPE + paged cache
// write (CudaRunnerOptions::fused_kvrope): one launch doing the work of
//   RmsNorm({lat, ld_lat, nullptr, 0, norm_weight, lat, ld_lat, kF32, n, kv_lora, eps})
//   ApplyRope({q, n, heads, q_token_stride, q_head_stride, q_offset, rope_dim, positions, cos,
//              sin, max_pos, interleave, .out2 = q_out2 ...})
//   RopeAndWriteKvCache({lat, ld_lat, lat + kv_lora, ld_lat, positions, slots, cos, sin,
//                        max_pos, n, kv_lora, rope_dim, interleave, cache})
// with bit-identical results: the same device routines (rmsnorm.cuh's RmsNormRow at RmsNorm's
// block size for kv_lora, so the same reduction order; rope.cuh's RopeHeadInPlace and
// RopeKpeToCache). The cache row's latent part is the norm's __float2bfloat16_rn of the fp32
// value it stores in lat, the value RopeAndWriteKvCache rounds. lat's k_pe part is not
// modified (as unfused). Grid (n, 1 + ceil(heads / warps)): block (t, 0) normalises token t's
// c_kv and writes its cache row, blocks (t, 1..) rotate its q heads, one warp per head
// (ApplyRope's item).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

struct MlaKvRopeParams {
  float* lat; int64_t ld_lat;        // [n, kv_lora + rope_dim] fp32: [c_kv | k_pe]; c_kv normalised in place
  const float* norm_weight;          // [kv_lora] (kv_a_layernorm)
  float eps;
  int64_t n, kv_lora, rope_dim;
  float* q;                          // rope_dim channels at q + t * q_token_stride + h * q_head_stride + q_offset
  int64_t heads, q_token_stride, q_head_stride, q_offset;
  float* q_out2 = nullptr;           // optional (RopeParams::out2): rotated q_pe also at
  int64_t q_out2_token_stride = 0, q_out2_head_stride = 0;  //  q_out2 + t * .. + h * ..
  const int32_t* positions;          // [n]; rows with a position outside [0, max_pos) are not rotated
  const int64_t* slots;              // [n]; a negative slot writes no cache row
  const float* cos; const float* sin;  // [max_pos, rope_dim / 2]
  int64_t max_pos;
  bool interleave;
  __nv_bfloat16* cache;              // [num_blocks * block_size, kv_lora + rope_dim] (one layer)
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch (launch.cuh; CudaRunnerOptions::pdl)
};
void MlaKvRope(const MlaKvRopeParams& p);

}  // namespace ds::cuda
