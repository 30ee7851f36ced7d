// The greedy argmax's (value, id) order and its block reduction, shared by sampling.cu's argmax
// kernels and lm_head_argmax.cu: the larger value wins, the lower id on ties, NaN never (a NaN
// compares false), as ds::cpu::Sample's greedy rule. Include only from .cu files.
#pragma once

#include <cmath>
#include <cstdint>

namespace ds::cuda::dev {

// Takes (x, i) into the running (bv, bi) when it ranks higher. Start from (-inf, INT32_MAX): an
// id of INT32_MAX at the end means every value was NaN (the callers then pick token 0).
__device__ __forceinline__ void ArgmaxTake(float x, int32_t i, float& bv, int32_t& bi) {
  if (x > bv || (x == bv && i < bi)) { bv = x; bi = i; }
}

// Reduces (bv, bi) over the block (ArgmaxTake's order; the result does not depend on which thread
// held what); the result in thread 0. sv / si: shared arrays of blockDim.x / 32 (<= 32) entries.
// Block-uniform call (it holds __syncthreads); may be called again on the same arrays. kWarps: the
// block's warps when known at compile time (0: blockDim.x / 32).
template <int kWarps = 0>
__device__ __forceinline__ void ArgmaxBlockReduce(float& bv, int32_t& bi, float* sv, int32_t* si) {
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
    ArgmaxTake(ov, oi, bv, bi);
  }
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, nw = kWarps > 0 ? kWarps : static_cast<int>(blockDim.x / 32);
  __syncthreads();  // sv / si free (a previous reduction's reads done)
  if (lane == 0) { sv[w] = bv; si[w] = bi; }
  __syncthreads();
  if (w == 0) {
    bv = lane < nw ? sv[lane] : -INFINITY;
    bi = lane < nw ? si[lane] : INT32_MAX;
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
      ArgmaxTake(ov, oi, bv, bi);
    }
  }
}

// The cross-block finish of a split argmax (sampling.cu's ArgmaxSplitKernel, lm_head_argmax.cu):
// every block of a group of `parts` blocks calls it with its block-reduced (bv, bi) in thread 0
// (after ArgmaxBlockReduce) and its index `part`. Thread 0 writes the pair to part_v / part_i
// [parts] and counts the block in *cnt (release: __threadfence, then atomicAdd); the group's last
// block to count reduces the parts (ArgmaxTake's order: the same id whichever block is last),
// writes *out (INT32_MAX, i.e. every value NaN: token 0) and resets *cnt to zero for the next
// launch (stream-ordered after this one). Block-uniform call (it holds __syncthreads); returns in
// every thread. sv / si: ArgmaxBlockReduce's shared arrays.
template <int kWarps = 0>
__device__ __forceinline__ void ArgmaxFinishAcrossBlocks(float bv, int32_t bi, int part, int parts, float* part_v,
                                                         int32_t* part_i, uint32_t* cnt, int32_t* out, float* sv,
                                                         int32_t* si) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    part_v[part] = bv;
    part_i[part] = bi;
    __threadfence();
    last = atomicAdd(cnt, 1u) == static_cast<uint32_t>(parts - 1);
    __threadfence();  // acquire side in the thread that saw the count (then the barrier)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other blocks' partials (each fenced before its add)
  bv = -INFINITY;
  bi = INT32_MAX;
  for (int t = threadIdx.x; t < parts; t += blockDim.x) ArgmaxTake(__ldcg(part_v + t), __ldcg(part_i + t), bv, bi);
  ArgmaxBlockReduce<kWarps>(bv, bi, sv, si);
  if (threadIdx.x == 0) {
    *out = bi == INT32_MAX ? 0 : bi;
    *cnt = 0;
  }
}

}  // namespace ds::cuda::dev
