#include "backend/cuda/moe_permute.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"

namespace ds::cuda {
namespace {

__global__ void CountKernel(const int32_t* ids, int64_t m, int32_t* counts, int64_t E) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int32_t e = ids[i];
  if (e >= 0 && e < E) atomicAdd(&counts[e], 1);
}

// One block: padded exclusive scan of the counts; cursors start at each segment.
__global__ void ScanKernel(int32_t* counts, int32_t* cursor, int32_t* offsets, int64_t E, int64_t align) {
  if (threadIdx.x != 0) return;
  int32_t acc = 0;
  for (int64_t e = 0; e < E; ++e) {
    offsets[e] = acc;
    cursor[e] = acc;
    acc += static_cast<int32_t>((counts[e] + align - 1) / align * align);
  }
  offsets[E] = acc;
}

__global__ void ScatterKernel(const int32_t* ids, int64_t m, int64_t top_k, int64_t E, int32_t* cursor, int32_t* pos,
                              int32_t* src_row) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int32_t e = ids[i];
  if (e < 0 || e >= E) { pos[i] = -1; return; }
  const int32_t r = atomicAdd(&cursor[e], 1);
  pos[i] = r;
  src_row[r] = static_cast<int32_t>(i / top_k);
}

__global__ void FillKernel(int32_t* a, int64_t n, int32_t v) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) a[i] = v;
}

// One block per permuted row (up to the capacity; rows past offsets[E] exit).
__global__ void GatherKernel(MoePermuteParams p) {
  const int64_t r = blockIdx.x;
  if (r >= p.offsets[p.num_experts]) return;
  const int32_t src = p.src_row[r];
  __nv_bfloat16* dst = p.xp + r * p.d;
  if (src < 0) {
    for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) dst[i] = __float2bfloat16_rn(0.f);
    return;
  }
  const __nv_bfloat16* s = p.x + static_cast<int64_t>(src) * p.ldx;
  if (p.d % 8 == 0 && p.ldx % 8 == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(s);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    for (int64_t i = threadIdx.x; i < p.d / 8; i += blockDim.x) d4[i] = s4[i];
  } else {
    for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) dst[i] = s[i];
  }
}

template <typename T>
__global__ void CombineKernel(MoeCombineParams p) {
  const int64_t t = blockIdx.x;
  float* out = p.out + t * p.ldout;
  const T* y = static_cast<const T*>(p.y);
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) {
    float acc = p.accumulate ? out[i] : 0.f;
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int32_t r = p.pos[t * p.top_k + j];
      if (r < 0) continue;
      acc += p.weights[t * p.top_k + j] * dev::ToF(y[static_cast<int64_t>(r) * p.ldy + i]);
    }
    out[i] = acc;
  }
}

}  // namespace

void MoePermute(const MoePermuteParams& p) {
  DS_CHECK(p.row_align >= 1 && p.num_experts >= 1) << "MoePermute: bad row_align/num_experts";
  if (p.n == 0) {
    DS_CUDA_CHECK(cudaMemsetAsync(p.offsets, 0, sizeof(int32_t) * (p.num_experts + 1), p.stream));
    return;
  }
  const int64_t m = p.n * p.top_k;
  const int64_t cap = PermuteCapacity(p.n, p.top_k, p.num_experts, p.row_align);
  int32_t* counts = p.workspace;
  int32_t* cursor = p.workspace + p.num_experts;
  DS_CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(int32_t) * p.num_experts, p.stream));
  FillKernel<<<dev::CeilDiv(cap, 256), 256, 0, p.stream>>>(p.src_row, cap, -1);
  CountKernel<<<dev::CeilDiv(m, 256), 256, 0, p.stream>>>(p.topk_ids, m, counts, p.num_experts);
  ScanKernel<<<1, 32, 0, p.stream>>>(counts, cursor, p.offsets, p.num_experts, p.row_align);
  ScatterKernel<<<dev::CeilDiv(m, 256), 256, 0, p.stream>>>(p.topk_ids, m, p.top_k, p.num_experts, cursor, p.pos,
                                                            p.src_row);
  if (p.xp) GatherKernel<<<cap, 128, 0, p.stream>>>(p);
  DS_CUDA_CHECK_LAUNCH("MoePermute kernels");
}

void MoeCombine(const MoeCombineParams& p) {
  if (p.n == 0) return;
  if (p.y_bf16) CombineKernel<__nv_bfloat16><<<p.n, 256, 0, p.stream>>>(p);
  else CombineKernel<float><<<p.n, 256, 0, p.stream>>>(p);
  DS_CUDA_CHECK_LAUNCH("CombineKernel");
}

}  // namespace ds::cuda
