// L2 prefetch of weights a later kernel reads (session 21, measurement switches): a persistent
// kernel whose phase leaves DRAM idle issues `cp.async.bulk.prefetch.L2.global` for byte ranges
// that the next kernel (or its own later phase) streams, so those loads hit L2 instead of DRAM.
// Each block issues its share of the ranges' concatenation (block b of `parts`: bytes
// [b * total / parts, (b + 1) * total / parts), in 16-byte units) from one warp's lanes, in
// chunks of kL2PrefetchChunk bytes; nothing waits for them (fire and forget: no result, no
// memory change), so a prefetch can only change timing, never a value.
// Host side: the plain struct a kernel's params carry; device side: l2_prefetch.cuh.
#pragma once

#include <cstdint>

namespace ds::cuda {

inline constexpr int kL2PrefetchMaxRanges = 6;
inline constexpr uint32_t kL2PrefetchChunk = 16 * 1024;

struct L2PrefetchRanges {
  const void* ptr[kL2PrefetchMaxRanges] = {};  // 16-byte aligned
  uint64_t bytes[kL2PrefetchMaxRanges] = {};   // multiples of 16 (Add rounds down)
  int n = 0;
  // 1: the prefetched lines get the L2 evict_last priority (createpolicy.fractional, 1.0), so
  // streaming loads with normal priority are evicted before them; 0: normal priority.
  int evict_last = 0;
  uint64_t total() const {
    uint64_t t = 0;
    for (int i = 0; i < n; ++i) t += bytes[i];
    return t;
  }
  // Appends [p, p + bytes) (bytes rounded down to 16; ignored when p is null, not 16-byte aligned,
  // or the list is full). Returns whether it was added.
  bool Add(const void* p, uint64_t b) {
    b &= ~uint64_t{15};
    if (p == nullptr || b == 0 || (reinterpret_cast<uintptr_t>(p) & 15) != 0 || n >= kL2PrefetchMaxRanges) return false;
    ptr[n] = p;
    bytes[n] = b;
    ++n;
    return true;
  }
};

}  // namespace ds::cuda
