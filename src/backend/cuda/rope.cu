#include "backend/cuda/rope.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.cuh"

namespace ds::cuda {
namespace {

__global__ void RopeKernel(RopeParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int warps = blockDim.x >> 5;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5);
  if (item >= p.n * p.heads) return;
  const int64_t t = item / p.heads, h = item % p.heads;
  const int pos = p.positions[t];
  if (pos < 0 || pos >= p.max_pos) return;
  rope::RopeHeadInPlace(p.x + t * p.token_stride + h * p.head_stride + p.offset, p.rope_dim, pos, p.cos, p.sin,
                        p.interleave,
                        p.out2 ? p.out2 + t * p.out2_token_stride + h * p.out2_head_stride : nullptr);
}

__global__ void KvCacheWriteKernel(KvCacheWriteParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slots[t];
  if (slot < 0) return;
  const int64_t width = p.kv_lora + p.rope_dim;
  __nv_bfloat16* dst = p.cache + slot * width;
  const float* lat = p.latent + t * p.ld_latent;
  for (int64_t i = threadIdx.x; i < p.kv_lora; i += blockDim.x) dst[i] = __float2bfloat16_rn(lat[i]);
  if (threadIdx.x < 32) {
    const int pos = p.positions[t];
    if (pos < 0 || pos >= p.max_pos) return;
    rope::RopeKpeToCache(p.k_pe + t * p.ld_k_pe, dst + p.kv_lora, p.rope_dim, pos, p.cos, p.sin, p.interleave);
  }
}

}  // namespace

void ApplyRope(const RopeParams& p) {
  DS_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= 64 * rope::kMaxPairsPerLane)
      << "ApplyRope: rope_dim must be even and <= 256, got " << p.rope_dim;
  if (p.n == 0 || p.heads == 0) return;
  const int64_t items = p.n * p.heads;
  const int warps = 8;
  LaunchKernel(RopeKernel, dev::CeilDiv(items, warps), warps * 32, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("RopeKernel");
}

void RopeAndWriteKvCache(const KvCacheWriteParams& p) {
  DS_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= 64 * rope::kMaxPairsPerLane)
      << "RopeAndWriteKvCache: bad rope_dim " << p.rope_dim;
  if (p.n == 0) return;
  LaunchKernel(KvCacheWriteKernel, p.n, 128, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("KvCacheWriteKernel");
}

}  // namespace ds::cuda
