#include "backend/cuda/embedding.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace ds::cuda {
namespace {

template <typename T>
__global__ void EmbeddingKernel(EmbeddingParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t t = blockIdx.x;
  const int32_t id = p.ids[t];
  float* out = p.out + t * p.d;
  const bool ok = id >= 0 && id < p.vocab;
  const T* row = static_cast<const T*>(p.table) + (ok ? static_cast<int64_t>(id) : 0) * p.d;
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) out[i] = ok ? dev::ToF(row[i]) : 0.f;
}

}  // namespace

void Embedding(const EmbeddingParams& p) {
  if (p.n == 0) return;
  if (p.table_bf16) LaunchKernel(EmbeddingKernel<__nv_bfloat16>, p.n, 256, 0, p.stream, p.pdl, p);
  else LaunchKernel(EmbeddingKernel<float>, p.n, 256, 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("EmbeddingKernel");
}

}  // namespace ds::cuda
