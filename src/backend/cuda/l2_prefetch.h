// L2 prefetch of read-only bytes (weights) ahead of the kernel that reads them: a decode step's
// latency-bound phases (RoPE + cache write, MLA decode, the merge, the norms, the router) leave
// HBM idle, and the weight-streaming GEMMs after them wait on DRAM. Issued on a side stream of
// the decode graph (CudaRunnerOptions::l2_prefetch), it moves those weights' DRAM reads into the
// idle phases; the GEMMs then hit L2. It has no effect on any value (no CPU counterpart: a cache
// hint; tests check that it leaves memory unchanged and rejects bad ranges).
//
// Mechanism: PTX `cp.async.bulk.prefetch.L2.global [addr], size` (sm_90; PTX ISA, "Data Movement
// and Conversion Instructions: cp.async.bulk.prefetch"), one per chunk of kL2PrefetchChunkBytes,
// spread over a small grid; each thread issues its chunks and exits (the copy engine completes
// them). Only the 16-byte aligned interior of each range is prefetched (the instruction's
// alignment rule), so a range never reaches outside its allocation. Below sm_90: a no-op.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

inline constexpr int kL2PrefetchMaxRanges = 8;
inline constexpr int64_t kL2PrefetchChunkBytes = int64_t{32} << 10;

struct L2PrefetchParams {
  const void* ptr[kL2PrefetchMaxRanges] = {};  // device addresses (nullptr only with bytes 0)
  int64_t bytes[kL2PrefetchMaxRanges] = {};    // >= 0
  int n = 0;                                    // ranges used, 0..kL2PrefetchMaxRanges
  cudaStream_t stream = nullptr;
};

// Adds [ptr, ptr + bytes) to p when it fits the range count; returns false (p unchanged) when
// p is full. Zero-byte ranges are skipped (true).
bool AddL2PrefetchRange(L2PrefetchParams& p, const void* ptr, int64_t bytes);

// Total bytes of p's ranges.
int64_t L2PrefetchBytes(const L2PrefetchParams& p);

// Enqueues the prefetch of p's ranges on p.stream (nothing when they hold no aligned 16-byte
// block). Errors (DS_CHECK): n outside 0..kL2PrefetchMaxRanges, negative bytes, a null pointer
// with bytes > 0.
void L2Prefetch(const L2PrefetchParams& p);

}  // namespace ds::cuda
