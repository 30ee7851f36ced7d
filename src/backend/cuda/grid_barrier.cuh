// Grid-wide barrier for persistent kernels launched cooperatively (every block resident), e.g.
// MoePersistent (moe_persistent.cu). Device code: include only from .cu files.
//
// sync[0] counts the arrivals, sync[1] is the generation. A kernel reads the generation once at
// its start (GridGeneration: no barrier of the launch can have completed before every block,
// this one included, has arrived) and its i-th barrier completes when the generation reaches
// gen0 + i. The last block to arrive resets the count and bumps the generation (release); the
// others poll it (acquire). The block barrier before thread 0's acq_rel arrival orders the
// block's stores before it (cumulativity); the one after the poll lets every thread read what
// the other blocks stored. Zero both words before the first launch; each launch leaves the count
// at 0 and the generation advanced by its barrier count, so graphs capture and replay it.
// Tests: CudaGridBarrier.* (tests/cuda/test_grid_barrier.cu).
#pragma once

#include <cstdint>

namespace ds::cuda::grid {

__device__ __forceinline__ uint32_t LdAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The generation at the kernel's start (call before the first barrier; any thread).
__device__ __forceinline__ uint32_t GridGeneration(const uint32_t* sync) { return LdAcquire(sync + 1); }

// Thread 0's arrival (after a block barrier): counts the block in; the last block to arrive
// resets the count and bumps the generation (release) and gets true, the others false (they then
// wait for the bump).
__device__ __forceinline__ bool ArriveLast(uint32_t* sync) {
  uint32_t old;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(old) : "l"(sync) : "memory");
  if (old != gridDim.x - 1) return false;
  asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" ::"l"(sync) : "memory");
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(sync + 1) : "memory");
  return true;
}

// Every thread of every block must call it, in the same order.
__device__ __forceinline__ void GridBarrier(uint32_t* sync, uint32_t target_gen) {
  __syncthreads();
  if (threadIdx.x == 0 && !ArriveLast(sync)) {
    while (static_cast<int32_t>(LdAcquire(sync + 1) - target_gen) < 0) {
    }
  }
  __syncthreads();
}

}  // namespace ds::cuda::grid
