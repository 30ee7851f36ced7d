#include "backend/cuda/moe_route_permute.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_routing.cuh"

namespace ds::cuda {
namespace {

constexpr int kThreads = routing::kMoeRoutingThreads;
constexpr int kMaxPairs = 1024;
constexpr int kMaxShared = 8;
// Copy blocks hold their source row in registers while they wait: up to this many 16-byte
// vectors per thread (d <= 4 x 8 x 256 = 8192 bf16: V3's 7168, V2-Lite's 2048); wider rows take
// CopyRow after the wait.
constexpr int kStagedVecs = 4;

__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// dst[0, d) = src[0, d) (bf16), 16-byte vectors when aligned.
__device__ __forceinline__ void CopyRow(const __nv_bfloat16* src, __nv_bfloat16* dst, int64_t d) {
  if (d % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    for (int64_t i = threadIdx.x; i < d / 8; i += blockDim.x) d4[i] = s4[i];
  } else {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void __launch_bounds__(kThreads) MoeRoutePermuteKernel(MoeRoutePermuteParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  __shared__ int s_ids[kMaxPairs];
  const MoeRoutingParams& rp = p.routing;
  const int64_t n = rp.n, K = rp.top_k, m = n * K, E = rp.num_experts;
  const uint32_t total = static_cast<uint32_t>(n + m);
  const int tid = threadIdx.x;
  if (static_cast<int64_t>(blockIdx.x) < n) {
    // Routing block of token t: route, publish the ids, then copy the token's shared-group rows.
    const int64_t t = blockIdx.x;
    routing::RouteToken(rp, t);  // thread 0 writes topk_ids / topk_weights row t
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      atomicAdd(p.sync, 1u);
    }
    for (int s = 0; s < p.num_shared_groups; ++s) {
      const int64_t r = m + s * n + t;
      if (tid == 0) p.src_row[r] = static_cast<int32_t>(t);
      CopyRow(p.x + t * p.ldx, p.xp + r * p.d, p.d);
    }
    return;
  }
  // Copy block of pair i = (t, j): its source row (token t's, written before this launch) is
  // loaded into registers first, so that load overlaps the routing blocks; then wait for every
  // token's ids (the destination row depends on them).
  const int64_t i = blockIdx.x - n, t = i / K;
  const __nv_bfloat16* src = p.x + t * p.ldx;
  const bool staged = p.d % 8 == 0 && p.d / 8 <= int64_t{kStagedVecs} * kThreads &&
                      reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(p.xp) % 16 == 0;
  uint4 row[kStagedVecs];
  if (staged) {
#pragma unroll
    for (int v = 0; v < kStagedVecs; ++v) {
      const int64_t q = tid + int64_t{v} * kThreads;
      if (q < p.d / 8) row[v] = reinterpret_cast<const uint4*>(src)[q];
    }
  }
  if (tid == 0) {
    while (LoadAcquire(p.sync) < static_cast<uint32_t>(n)) __nanosleep(32);
  }
  __syncthreads();
  for (int64_t k = tid; k < m; k += kThreads) s_ids[k] = __ldcg(rp.topk_ids + k);
  __syncthreads();
  const int e = s_ids[i];
  // Row of pair i: pairs of lower experts, then pairs of expert e with a lower pair index.
  int below = 0;
  for (int64_t k0 = 0; k0 < m; k0 += kThreads) {
    const int64_t k = k0 + tid;
    const bool before = k < m && (s_ids[k] < e || (s_ids[k] == e && k < i));
    below += __syncthreads_count(before);
  }
  const int64_t r = below;
  if (tid == 0) {
    p.pos[i] = static_cast<int32_t>(r);
    p.src_row[r] = static_cast<int32_t>(t);
  }
  if (i == 0) {  // the offsets: offsets[e'] = pairs with an expert below e' (row_align 1)
    for (int64_t ee = tid; ee <= E; ee += kThreads) {
      int c = 0;
      for (int64_t k = 0; k < m; ++k) c += s_ids[k] < ee;
      p.offsets[ee] = c;
    }
    for (int s = tid; s < p.num_shared_groups; s += kThreads) p.offsets[E + 1 + s] = static_cast<int32_t>(m + (s + 1) * n);
  }
  if (!staged) {
    CopyRow(src, p.xp + r * p.d, p.d);
  } else {
    uint4* dst = reinterpret_cast<uint4*>(p.xp + r * p.d);
#pragma unroll
    for (int v = 0; v < kStagedVecs; ++v) {
      const int64_t q = tid + int64_t{v} * kThreads;
      if (q < p.d / 8) dst[q] = row[v];
    }
  }
  // Every block has read what it needs from the counter's protected data (s_ids, before the
  // barriers above): leave; the last one out resets the counter for the next launch / graph
  // replay (which starts after this grid has finished). Last in the block, so the atomic's
  // round trip is off the path to the row's stores.
  if (tid == 0) {
    const uint32_t before = atomicAdd(p.sync, 1u);
    if (before == total - 1) *p.sync = 0u;
  }
}

}  // namespace

void MoeRoutePermute(const MoeRoutePermuteParams& p) {
  const MoeRoutingParams& rp = p.routing;
  DS_CHECK(rp.num_experts > 0 && rp.num_experts <= routing::kMaxExperts)
      << "MoeRoutePermute: num_experts " << rp.num_experts;
  DS_CHECK(rp.top_k > 0 && rp.top_k <= 32 && rp.top_k <= rp.num_experts) << "MoeRoutePermute: top_k " << rp.top_k;
  DS_CHECK(rp.n_group >= 1 && rp.n_group <= 64 && rp.num_experts % rp.n_group == 0)
      << "MoeRoutePermute: n_group " << rp.n_group;
  DS_CHECK(rp.topk_group >= 1 && rp.topk_group <= rp.n_group) << "MoeRoutePermute: topk_group " << rp.topk_group;
  DS_CHECK(rp.n >= 0 && rp.n <= kMoeRoutePermuteMaxTokens && rp.n * rp.top_k <= kMaxPairs)
      << "MoeRoutePermute: " << rp.n << " tokens (at most " << kMoeRoutePermuteMaxTokens << ")";
  DS_CHECK(p.num_shared_groups >= 0 && p.num_shared_groups <= kMaxShared)
      << "MoeRoutePermute: shared groups " << p.num_shared_groups;
  DS_CHECK(p.d > 0 && p.ldx >= p.d && p.sync != nullptr) << "MoeRoutePermute: bad d / ldx / sync";
  if (rp.n == 0) {
    DS_CUDA_CHECK(cudaMemsetAsync(p.offsets, 0, sizeof(int32_t) * (rp.num_experts + p.num_shared_groups + 1), p.stream));
    return;
  }
  const int64_t blocks = rp.n + rp.n * rp.top_k;
  LaunchKernel(MoeRoutePermuteKernel, static_cast<unsigned>(blocks), kThreads, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("MoeRoutePermuteKernel");
}

}  // namespace ds::cuda
