// Token embedding lookup, the CUDA counterpart of ds::cpu::Embedding: out[i] = table[ids[i]]
// as fp32. The table is bf16 or fp32 on the device. ids must be in [0, vocab) (the runner
// validates them on the host); a row with an out-of-range id is written as zeros.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

struct EmbeddingParams {
  const int32_t* ids; int64_t n;  // [n] device
  const void* table; bool table_bf16 = true; int64_t vocab, d;
  float* out;                     // [n, d]
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way.
  bool pdl = false;
  // Optional (both or neither): row t's id is prev_ids[prev_rows[t]] where prev_rows[t] >= 0,
  // else ids[t]. The decode graph's gather of the previous step's sampled ids (overlap
  // scheduling, CudaRunnerOptions::graph_io): prev_rows [n] device, prev_ids device, indexed by
  // prev_rows' values (the caller keeps them in range).
  const int32_t* prev_rows = nullptr;
  const int32_t* prev_ids = nullptr;
};
void Embedding(const EmbeddingParams& p);

}  // namespace ds::cuda
