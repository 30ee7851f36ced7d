#include "backend/cuda/embedding.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

template <typename T>
__global__ void EmbeddingKernel(EmbeddingParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t t = blockIdx.x;
  const int32_t prev = p.prev_rows ? p.prev_rows[t] : -1;
  const int32_t id = prev >= 0 ? p.prev_ids[prev] : p.ids[t];
  float* out = p.out + t * p.d;
  const bool ok = id >= 0 && id < p.vocab;
  const T* row = static_cast<const T*>(p.table) + (ok ? static_cast<int64_t>(id) : 0) * p.d;
  // kBatch elements per thread loaded before they are stored (a load-store loop is a chain of
  // dependent round trips: ncu, session 6 run 2, 11-15 us for one V3 row of 7168).
  constexpr int kBatch = 8;
  const int64_t bd = blockDim.x;
  for (int64_t i0 = threadIdx.x; i0 < p.d; i0 += kBatch * bd) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t i = i0 + j * bd;
      v[j] = ok && i < p.d ? dev::ToF(row[i]) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t i = i0 + j * bd;
      if (i < p.d) out[i] = v[j];
    }
  }
}

}  // namespace

void Embedding(const EmbeddingParams& p) {
  if (p.n == 0) return;
  DS_CHECK((p.prev_rows == nullptr) == (p.prev_ids == nullptr)) << "Embedding: prev_rows and prev_ids go together";
  if (p.table_bf16) LaunchKernel(EmbeddingKernel<__nv_bfloat16>, p.n, 256, 0, p.stream, p.pdl, p);
  else LaunchKernel(EmbeddingKernel<float>, p.n, 256, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("EmbeddingKernel");
}

}  // namespace ds::cuda
