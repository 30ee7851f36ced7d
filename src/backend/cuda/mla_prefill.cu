#include "backend/cuda/mla_prefill.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"

namespace ds::cuda {
namespace {

constexpr int BQ = 32, BKV = 32, kThreads = 128, kMaxOPerThread = 32;  // dv <= 128

template <typename TOut>
__global__ void __launch_bounds__(kThreads) MlaPrefillKernel(MlaPrefillParams p) {
  extern __shared__ float smem[];
  const int dqk = static_cast<int>(p.d_nope + p.d_rope), dv = static_cast<int>(p.dv);
  const int ldq = dqk + 1, ldk = dqk + 1;
  float* Qs = smem;                 // [BQ][ldq]
  float* Ks = Qs + BQ * ldq;        // [BKV][ldk]
  float* Vs = Ks + BKV * ldk;       // [BKV][dv]
  float* Ps = Vs + BKV * dv;        // [BQ][BKV + 1]
  const int s = blockIdx.z, h = blockIdx.y;
  const int q0 = p.q_start[s], nq = p.q_start[s + 1] - q0;
  const int qt0 = blockIdx.x * BQ;
  if (qt0 >= nq) return;
  const int k0 = p.k_start[s], nk = p.k_start[s + 1] - k0;
  const int pos0 = p.q_pos0[s];
  const int tid = threadIdx.x, r = tid >> 2, c = tid & 3;
  // Load the Q tile.
  for (int idx = tid; idx < BQ * dqk; idx += kThreads) {
    const int rr = idx / dqk, d = idx % dqk;
    float v = 0.f;
    if (qt0 + rr < nq) v = p.q[static_cast<int64_t>(q0 + qt0 + rr) * p.q_tok_stride + h * p.q_head_stride + d];
    Qs[rr * ldq + d] = v;
  }
  const bool row_ok = qt0 + r < nq;
  const int qpos = pos0 + qt0 + r;
  float m = -INFINITY, l = 0.f;
  float o[kMaxOPerThread];
#pragma unroll
  for (int i = 0; i < kMaxOPerThread; ++i) o[i] = 0.f;
  // Keys visible to the last query of the tile.
  const int last_q = min(nq, qt0 + BQ) - 1;
  const int kend = min(nk, pos0 + last_q + 1);
  for (int kt = 0; kt < kend; kt += BKV) {
    __syncthreads();
    for (int idx = tid; idx < BKV * dqk; idx += kThreads) {
      const int j = idx / dqk, d = idx % dqk;
      float v = 0.f;
      if (kt + j < nk) {
        const int64_t tok = k0 + kt + j;
        v = d < p.d_nope ? p.k_nope[tok * p.kn_tok_stride + h * p.kn_head_stride + d]
                         : p.k_rope[tok * p.kr_tok_stride + h * p.kr_head_stride + (d - p.d_nope)];
      }
      Ks[j * ldk + d] = v;
    }
    for (int idx = tid; idx < BKV * dv; idx += kThreads) {
      const int j = idx / dv, d = idx % dv;
      Vs[j * dv + d] = kt + j < nk ? p.v[(k0 + kt + j) * p.v_tok_stride + h * p.v_head_stride + d] : 0.f;
    }
    __syncthreads();
    float sc[BKV / 4];
    float tmax = -INFINITY;
#pragma unroll
    for (int mm = 0; mm < BKV / 4; ++mm) {
      const int j = c + 4 * mm;
      float acc = 0.f;
      for (int d = 0; d < dqk; ++d) acc += Qs[r * ldq + d] * Ks[j * ldk + d];
      acc *= p.softmax_scale;
      const bool ok = row_ok && kt + j < nk && kt + j <= qpos;
      sc[mm] = ok ? acc : -INFINITY;
      tmax = fmaxf(tmax, sc[mm]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
    const float m_new = fmaxf(m, tmax);
    const float alpha = m_new == -INFINITY ? 1.f : expf(m - m_new);
    float psum = 0.f;
#pragma unroll
    for (int mm = 0; mm < BKV / 4; ++mm) {
      const float pv = sc[mm] == -INFINITY ? 0.f : expf(sc[mm] - m_new);
      Ps[r * (BKV + 1) + c + 4 * mm] = pv;
      psum += pv;
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    psum += __shfl_xor_sync(0xffffffffu, psum, 2);
    l = l * alpha + psum;
    m = m_new;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kMaxOPerThread; ++i) o[i] *= alpha;
    for (int j = 0; j < BKV; ++j) {
      const float pv = Ps[r * (BKV + 1) + j];
#pragma unroll
      for (int i = 0; i < kMaxOPerThread; ++i) {
        const int d = c + 4 * i;
        if (d < dv) o[i] += pv * Vs[j * dv + d];
      }
    }
  }
  if (!row_ok) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(q0 + qt0 + r) * p.o_tok_stride + h * p.o_head_stride;
#pragma unroll
  for (int i = 0; i < kMaxOPerThread; ++i) {
    const int d = c + 4 * i;
    if (d < dv) out[d] = dev::FromF<TOut>(o[i] * inv);
  }
}

}  // namespace

void MlaPrefillAttention(const MlaPrefillParams& p) {
  DS_CHECK(p.d_nope + p.d_rope > 0 && p.d_nope + p.d_rope <= 256 && p.dv > 0 && p.dv <= 4 * kMaxOPerThread)
      << "MlaPrefillAttention: unsupported head dims qk=" << p.d_nope + p.d_rope << " v=" << p.dv;
  if (p.num_seqs == 0 || p.max_q_len == 0) return;
  const int dqk = static_cast<int>(p.d_nope + p.d_rope);
  const size_t smem = sizeof(float) * (BQ * (dqk + 1) + BKV * (dqk + 1) + BKV * p.dv + BQ * (BKV + 1));
  dim3 grid(dev::CeilDiv(p.max_q_len, BQ), p.heads, p.num_seqs);
  DS_CHECK(p.num_seqs < 65536 && p.heads < 65536) << "MlaPrefillAttention: grid too large";
  if (p.out_type == DTypeOut::kF32) {
    DS_CUDA_CHECK(cudaFuncSetAttribute(MlaPrefillKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    MlaPrefillKernel<float><<<grid, kThreads, smem, p.stream>>>(p);
  } else {
    DS_CUDA_CHECK(cudaFuncSetAttribute(MlaPrefillKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    MlaPrefillKernel<__nv_bfloat16><<<grid, kThreads, smem, p.stream>>>(p);
  }
  DS_CUDA_CHECK_LAUNCH("MlaPrefillKernel");
}

}  // namespace ds::cuda
