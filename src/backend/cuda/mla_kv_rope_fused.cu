#include "backend/cuda/mla_kv_rope_fused.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rmsnorm.cuh"
#include "backend/cuda/rope.cuh"

namespace ds::cuda {
namespace {

// blockDim.x == norm::RmsNormThreads(kv_lora) (RmsNorm's block size: its reduction order).
__global__ void MlaKvRopeKernel(MlaKvRopeParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t t = blockIdx.x;
  if (blockIdx.y == 0) {
    // RmsNorm of c_kv (lat[t, 0 .. kv_lora), in place) + RopeAndWriteKvCache of token t.
    float* c = p.lat + t * p.ld_lat;  // [kv_lora + rope_dim]: c_kv | k_pe
    const int64_t slot = p.slots[t];
    // The cache row [kv_lora + rope_dim] bf16, or none (negative slot).
    __nv_bfloat16* dst = slot >= 0 ? p.cache + slot * (p.kv_lora + p.rope_dim) : nullptr;
    norm::RmsNormRow<float>(c, nullptr, p.norm_weight, c, dst, p.kv_lora, p.eps);
    if (dst == nullptr || threadIdx.x >= 32) return;
    const int pos = p.positions[t];
    if (pos < 0 || pos >= p.max_pos) return;
    rope::RopeKpeToCache(c + p.kv_lora, dst + p.kv_lora, p.rope_dim, pos, p.cos, p.sin, p.interleave);
    return;
  }
  // ApplyRope of q: warp w of block (t, y) takes head (y - 1) * warps + w.
  const int warps = blockDim.x >> 5;
  const int64_t h = static_cast<int64_t>(blockIdx.y - 1) * warps + (threadIdx.x >> 5);
  if (h >= p.heads) return;
  const int pos = p.positions[t];
  if (pos < 0 || pos >= p.max_pos) return;
  rope::RopeHeadInPlace(p.q + t * p.q_token_stride + h * p.q_head_stride + p.q_offset, p.rope_dim, pos, p.cos,
                        p.sin, p.interleave,
                        p.q_out2 ? p.q_out2 + t * p.q_out2_token_stride + h * p.q_out2_head_stride : nullptr);
}

}  // namespace

void MlaKvRope(const MlaKvRopeParams& p) {
  DS_CHECK(p.n >= 0 && p.kv_lora > 0 && p.heads >= 0) << "MlaKvRope: bad shape n=" << p.n << " kv_lora=" << p.kv_lora;
  DS_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= 64 * rope::kMaxPairsPerLane)
      << "MlaKvRope: rope_dim must be even and <= 256, got " << p.rope_dim;
  DS_CHECK(p.ld_lat >= p.kv_lora + p.rope_dim) << "MlaKvRope: ld_lat " << p.ld_lat << " < kv_lora + rope_dim";
  if (p.n == 0) return;
  const int threads = norm::RmsNormThreads(p.kv_lora), warps = threads / 32;
  const dim3 grid(static_cast<unsigned>(p.n), 1 + static_cast<unsigned>(dev::CeilDiv(p.heads, warps)));
  LaunchKernel(MlaKvRopeKernel, grid, threads, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("MlaKvRopeKernel");
}

}  // namespace ds::cuda
