// Device side of l2_prefetch.h: one warp issues its block's share of an L2PrefetchRanges list as
// bulk L2 prefetches (PTX ISA 8.x, "cp.async.bulk.prefetch": sm_90; non-blocking, no completion
// to wait on). Include only from .cu files.
#pragma once

#include <cstdint>

#include "backend/cuda/l2_prefetch.h"

namespace ds::cuda::dev {

// Called by all 32 lanes of one warp (lane = threadIdx.x & 31): part `part` of `parts` of r's
// concatenated bytes, split at 16-byte units, then into kL2PrefetchChunk chunks over the lanes.
// r is read field by field (a kernel parameter: no local copy).
__device__ __forceinline__ void L2PrefetchShare(const L2PrefetchRanges& r, int part, int parts, int lane) {
  uint64_t total = 0;
  for (int i = 0; i < r.n; ++i) total += r.bytes[i];
  const uint64_t units = total >> 4;
  const uint64_t lo = (units * static_cast<uint64_t>(part) / static_cast<uint64_t>(parts)) << 4;
  const uint64_t hi = (units * static_cast<uint64_t>(part + 1) / static_cast<uint64_t>(parts)) << 4;
  uint64_t policy = 0;
  if (r.evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  uint64_t start = 0;
  for (int i = 0; i < r.n; ++i) {
    const uint64_t b0 = start > lo ? start : lo, end = start + r.bytes[i], b1 = end < hi ? end : hi;
    if (b0 < b1) {
      const char* base = static_cast<const char*>(r.ptr[i]) + (b0 - start);
      const uint64_t len = b1 - b0;
      for (uint64_t off = uint64_t{kL2PrefetchChunk} * lane; off < len; off += uint64_t{kL2PrefetchChunk} * 32) {
        const uint32_t size = static_cast<uint32_t>(len - off < kL2PrefetchChunk ? len - off : kL2PrefetchChunk);
        if (r.evict_last)
          asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;\n" ::"l"(base + off), "r"(size),
                       "l"(policy)
                       : "memory");
        else
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(base + off), "r"(size) : "memory");
      }
    }
    start = end;
  }
}

}  // namespace ds::cuda::dev
