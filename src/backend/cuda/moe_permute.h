// MoE token permutation by expert and weighted combine (the data movement around the grouped
// expert GEMM; the CPU backend loops over experts instead).
//
// Permute: the n * top_k (token, expert) pairs are laid out grouped by expert; expert e owns
// rows [offsets[e], offsets[e+1]) of the permuted matrix, each segment padded to a multiple
// of `row_align` (the grouped GEMM's tile height) with rows whose source is -1 (zeros).
// pos[t * top_k + j] = the permuted row of pair (t, j). Row order inside a segment is
// arbitrary (atomics); results do not depend on it. Capacity (rows to allocate):
// PermuteCapacity(n, top_k, E, row_align).
//
// Combine: out[t] (+)= sum_j weights[t, j] * y[pos[t * top_k + j]] (fp32).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

inline int64_t PermuteCapacity(int64_t n, int64_t top_k, int64_t E, int64_t row_align) {
  return n * top_k + E * (row_align - 1);
}

struct MoePermuteParams {
  const int32_t* topk_ids;  // [n, top_k]
  int64_t n, top_k, num_experts, row_align;
  const __nv_bfloat16* x; int64_t ldx;  // [n, d] activations to gather
  int64_t d;
  // outputs
  int32_t* offsets;    // [E + 1]
  int32_t* pos;        // [n * top_k]
  int32_t* src_row;    // [capacity] (token of each permuted row, -1 = padding)
  __nv_bfloat16* xp;   // [capacity, d] permuted activations (padding rows zeroed)
  int32_t* workspace;  // [2 * E] counts and cursors
  cudaStream_t stream = nullptr;
};
void MoePermute(const MoePermuteParams& p);

struct MoeCombineParams {
  const void* y; bool y_bf16 = false; int64_t ldy;  // [capacity, d]
  const int32_t* pos;                                // [n * top_k]
  const float* weights;                              // [n, top_k]
  int64_t n, top_k, d;
  float* out; int64_t ldout;                         // [n, d]
  bool accumulate = false;
  cudaStream_t stream = nullptr;
};
void MoeCombine(const MoeCombineParams& p);

}  // namespace ds::cuda
