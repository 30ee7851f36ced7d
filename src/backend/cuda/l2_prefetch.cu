// L2 prefetch (l2_prefetch.h).
#include "backend/cuda/l2_prefetch.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace ds::cuda {
namespace {

// The 16-byte aligned interior of each range and the chunk count before it.
struct PrefetchPlan {
  uintptr_t start[kL2PrefetchMaxRanges];
  int64_t len[kL2PrefetchMaxRanges];
  int64_t first_chunk[kL2PrefetchMaxRanges + 1];
  int n;
};

// kL2PrefetchChunkBytes as a device-usable constant.
constexpr int64_t kChunk = 32 << 10;
static_assert(kChunk == kL2PrefetchChunkBytes, "chunk size");

__global__ void L2PrefetchKernel(PrefetchPlan plan) {
  const int64_t total = plan.first_chunk[plan.n];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int r = 0;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < total; c += step) {
    while (c >= plan.first_chunk[r + 1]) ++r;
    const int64_t off = (c - plan.first_chunk[r]) * kChunk, rest = plan.len[r] - off;
    const uint32_t size = static_cast<uint32_t>(rest < kChunk ? rest : kChunk);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(plan.start[r] + off), "r"(size) : "memory");
#else
    (void)size;
#endif
  }
}

}  // namespace

bool AddL2PrefetchRange(L2PrefetchParams& p, const void* ptr, int64_t bytes) {
  if (bytes <= 0 || ptr == nullptr) return true;
  if (p.n >= kL2PrefetchMaxRanges) return false;
  p.ptr[p.n] = ptr;
  p.bytes[p.n] = bytes;
  ++p.n;
  return true;
}

int64_t L2PrefetchBytes(const L2PrefetchParams& p) {
  int64_t b = 0;
  for (int i = 0; i < p.n && i < kL2PrefetchMaxRanges; ++i) b += std::max<int64_t>(0, p.bytes[i]);
  return b;
}

void L2Prefetch(const L2PrefetchParams& p) {
  DS_CHECK(p.n >= 0 && p.n <= kL2PrefetchMaxRanges) << "L2Prefetch: " << p.n << " ranges (at most "
                                                    << kL2PrefetchMaxRanges << ")";
  PrefetchPlan plan{};
  plan.n = 0;
  plan.first_chunk[0] = 0;
  for (int i = 0; i < p.n; ++i) {
    DS_CHECK(p.bytes[i] >= 0) << "L2Prefetch: range " << i << " has " << p.bytes[i] << " bytes";
    DS_CHECK(p.ptr[i] != nullptr || p.bytes[i] == 0) << "L2Prefetch: range " << i << " is a null pointer";
    if (p.bytes[i] == 0) continue;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p.ptr[i]);
    const uintptr_t s = (a + 15) & ~uintptr_t{15}, e = (a + static_cast<uintptr_t>(p.bytes[i])) & ~uintptr_t{15};
    if (e <= s) continue;
    const int j = plan.n++;
    plan.start[j] = s;
    plan.len[j] = static_cast<int64_t>(e - s);
    plan.first_chunk[j + 1] = plan.first_chunk[j] + (plan.len[j] + kL2PrefetchChunkBytes - 1) / kL2PrefetchChunkBytes;
  }
  const int64_t chunks = plan.first_chunk[plan.n];
  if (chunks == 0) return;
  constexpr int kThreads = 128;
  const int blocks = static_cast<int>(std::min<int64_t>((chunks + kThreads - 1) / kThreads, 64));
  L2PrefetchKernel<<<blocks, kThreads, 0, p.stream>>>(plan);
  DS_CUDA_CHECK_LAUNCH("L2PrefetchKernel");
}

}  // namespace ds::cuda
