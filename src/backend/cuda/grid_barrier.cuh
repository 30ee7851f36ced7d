// Grid-wide barrier for persistent kernels launched cooperatively (every block resident), e.g.
// MoePersistent (moe_persistent.cu), MlaAttnPersistent (mla_attn_persistent.cu). Device code:
// include only from .cu files.
//
// `sync` holds one 64-bit arrival counter (the two 32-bit words a kernel's params carry; 8-byte
// aligned), zero before the first launch, never reset. Each launch starts at a multiple of
// kGridEpoch: a kernel reads it once at its start (GridBase: fewer than gridDim.x arrivals of this
// launch can precede the read, since no barrier completes before this block arrives, and
// gridDim.x < kGridEpoch), and its i-th barrier completes when the counter reaches base + i *
// gridDim.x. Thread 0 of each block arrives with a release add and polls with acquire loads; the
// block barrier before the arrival orders the block's stores before it (cumulativity), the one
// after the poll lets every thread read what the other blocks stored. The last block to arrive at
// the launch's final barrier (GridBarrier's `final`) pads the counter to the next multiple of
// kGridEpoch, so the next launch's base is exact whatever its grid or barrier count; CUDA graphs
// capture and replay it. One atomic on the critical path (session 12's timing report: 0.94-1.16
// us a barrier against 1.44-1.52 for a count + generation pair whose last arrival reset the
// count and then bumped the generation).
// Tests: CudaGridBarrier.* (tests/cuda/test_grid_barrier.cu).
#pragma once

#include <cstdint>

namespace ds::cuda::grid {

// A launch's arrivals stay below this (grid <= 2^10 blocks x <= 2^10 barriers). Launches that
// share a counter must be stream-ordered (one after another, as in one stream or graph).
inline constexpr uint64_t kGridEpoch = uint64_t{1} << 20;

__device__ __forceinline__ uint32_t LdAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t LdAcquire64(const uint32_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The launch's base count (call before the first barrier; any thread).
__device__ __forceinline__ uint64_t GridBase(const uint32_t* sync) {
  const uint64_t c = LdAcquire64(sync);
  return c - c % kGridEpoch;
}

// One block's arrival at barrier `target` and its wait (one thread of the block, after a barrier
// of the threads whose stores must be ordered before it, and before one that lets them read what
// the other blocks stored): GridBarrier's thread 0, or a kernel whose barrier only some warps take
// (MoeRing's consumers).
__device__ __forceinline__ void GridArriveAndWait(uint32_t* sync, uint64_t target, bool final) {
  uint64_t old;
  asm volatile("atom.add.release.gpu.global.u64 %0, [%1], %2;" : "=l"(old) : "l"(sync), "l"(uint64_t{1}) : "memory");
  while (LdAcquire64(sync) < target) {
  }
  if (final && old + 1 == target)  // every block has arrived: pad to the next launch's base
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(sync), "l"(kGridEpoch - target % kGridEpoch)
                 : "memory");
}

// A launch whose blocks hand data over by other means and never wait at a barrier (MoeRing's
// act_tagged form, moe_ring.h) still moves the counter to the next launch's base: each block adds
// its share (one thread, after GridBase), block 0 kGridEpoch - (grid - 1) and the others 1, so the
// launch adds kGridEpoch in all, with no atomic's return to wait for (a base read at any block's
// start stays exact: the count reaches base + kGridEpoch only with the last share).
__device__ __forceinline__ void GridArriveNoWait(uint32_t* sync, int block, int grid) {
  const uint64_t share = block == 0 ? kGridEpoch - static_cast<uint64_t>(grid - 1) : uint64_t{1};
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(sync), "l"(share) : "memory");
}

// Barrier i of the launch: target = base + i * gridDim.x; `final` on the launch's last barrier.
// Every thread of every block must call it, in the same order.
__device__ __forceinline__ void GridBarrier(uint32_t* sync, uint64_t target, bool final = false) {
  __syncthreads();
  if (threadIdx.x == 0) GridArriveAndWait(sync, target, final);
  __syncthreads();
}

}  // namespace ds::cuda::grid
