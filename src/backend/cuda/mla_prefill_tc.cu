// MLA prefill attention on tensor cores (see mla_prefill.h, MlaPrefillAttentionTc).
//
// Flash-attention-2 forward (Dao 2023, "FlashAttention-2", algorithm 1) specialised for MLA's
// naive form: qk head dim 192 = 128 (nope, per head) + 64 (rope, one key shared by all heads),
// v head dim 128. One block = block_q queries of one (sequence, head), kWarps warps, each warp
// owning 16 query rows for the whole key loop:
//   - Q tile: fp32 from global, rounded to bf16 into shared memory, then held in registers as
//     12 mma A fragments (16 rows x 192).
//   - K/V tiles of 64 keys: cp.async into shared memory (rows padded by 16 bytes so ldmatrix
//     rows fall in distinct banks), double-buffered: tile i+1 loads while tile i computes.
//   - S = Q K^T: mma.sync m16n8k16 (bf16 in, fp32 accumulate), B fragments by ldmatrix.
//   - online softmax in fp32 on the accumulators: exp2 with softmax_scale * log2(e) folded in,
//     causal / sequence-end masking only on the tiles that need it.
//   - O += P V: P rounded to bf16 straight from the S accumulators (the C layout of two n-tiles
//     is the A layout of one k-step), V fragments by ldmatrix.trans.
// Blocks are ordered head-major with a sequence's last (most expensive) query tiles first, so
// the blocks resident together share one head's K/V in L2 and the short tiles form the tail.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/mla_prefill.h"

namespace ds::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kDn = 128, kDr = 64, kDqk = kDn + kDr, kDv = 128, kBK = 64;
constexpr int kLdK = kDqk + 8;  // shared-memory row pitch (elements): 400 B, 25 16-byte units
constexpr int kLdV = kDv + 8;   // 272 B, 17 units: 8 consecutive rows hit 8 distinct bank groups
constexpr int kStage = kBK * kLdK + kBK * kLdV;  // elements per K/V stage

template <int kWarps>
constexpr size_t SmemBytes() {
  // Two K/V stages; the Q tile is staged over stage 1 (it is moved to registers before the
  // first write to stage 1) and may extend past it.
  const size_t q = static_cast<size_t>(kStage) + static_cast<size_t>(kWarps) * 16 * kLdK;
  return (q > 2 * static_cast<size_t>(kStage) ? q : 2 * static_cast<size_t>(kStage)) * sizeof(bf16);
}

__device__ __forceinline__ uint32_t SmemAddr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0 source bytes: the destination is zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_group 0;\n" ::); }
__device__ __forceinline__ void Ldsm4(uint32_t addr, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void Ldsm4T(uint32_t addr, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// c[16x8] += a[16x16] (row-major) * b[16x8] (col-major), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void Store2(float* o, float a, float b) { *reinterpret_cast<float2*>(o) = make_float2(a, b); }
__device__ __forceinline__ void Store2(bf16* o, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(a, b);
}

template <int kWarps, typename TOut>
__global__ void __launch_bounds__(kWarps * 32, 8 / kWarps) MlaPrefillTcKernel(MlaPrefillTcParams p) {
  constexpr int BQ = kWarps * 16, NT = kWarps * 32;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* const smem = reinterpret_cast<bf16*>(smem_raw);
  const int s = blockIdx.z, h = blockIdx.y;
  const int q0 = p.q_start[s], nq = p.q_start[s + 1] - q0;
  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);  // last tiles first
  const int qt0 = qt * BQ;
  if (qt0 >= nq) return;
  const int k0 = p.k_start[s], nk = p.k_start[s + 1] - k0, pos0 = p.q_pos0[s];
  const int last_q = min(nq, qt0 + BQ) - 1;
  const int kend = max(0, min(nk, pos0 + last_q + 1));  // keys visible to the block's last query
  const int n_kt = (kend + kBK - 1) / kBK;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;

  // K/V tile kt -> stage st: k_nope and v (16 chunks of 16 bytes per row, adjacent in the
  // kv_b_proj output) and k_rope (8 chunks); keys past the sequence are zero-filled.
  const bf16* const kn_base = p.k_nope + static_cast<int64_t>(h) * p.kn_head_stride;
  const bf16* const kr_base = p.k_rope + static_cast<int64_t>(h) * p.kr_head_stride;
  const bf16* const v_base = p.v + static_cast<int64_t>(h) * p.v_head_stride;
  const auto load_kv = [&](int kt, bf16* st) {
    bf16* Ks = st;
    bf16* Vs = st + kBK * kLdK;
    const int kbase = kt * kBK;
    {
      constexpr int kRowsPerPass = NT / 16;
      const int ch = tid & 15;
#pragma unroll
      for (int i = 0; i < kBK / kRowsPerPass; ++i) {
        const int row = (tid >> 4) + i * kRowsPerPass, key = kbase + row;
        const bool ok = key < nk;
        const int64_t tok = k0 + (ok ? key : 0);
        CpAsync16(SmemAddr(Ks + row * kLdK + ch * 8), kn_base + tok * p.kn_tok_stride + ch * 8, ok);
        CpAsync16(SmemAddr(Vs + row * kLdV + ch * 8), v_base + tok * p.v_tok_stride + ch * 8, ok);
      }
    }
    {
      constexpr int kRowsPerPass = NT / 8;
      const int ch = tid & 7;
#pragma unroll
      for (int i = 0; i < kBK / kRowsPerPass; ++i) {
        const int row = (tid >> 3) + i * kRowsPerPass, key = kbase + row;
        const bool ok = key < nk;
        const int64_t tok = k0 + (ok ? key : 0);
        CpAsync16(SmemAddr(Ks + row * kLdK + kDn + ch * 8), kr_base + tok * p.kr_tok_stride + ch * 8, ok);
      }
    }
    CpAsyncCommit();
  };

  if (n_kt > 0) load_kv(0, smem);
  // Q tile -> bf16 in shared memory (over stage 1) -> registers.
  bf16* const Qs = smem + kStage;
  for (int c = tid; c < BQ * (kDqk / 4); c += NT) {
    const int row = c / (kDqk / 4), ch = c % (kDqk / 4);
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (qt0 + row < nq)
      v = *reinterpret_cast<const float4*>(p.q + static_cast<int64_t>(q0 + qt0 + row) * p.q_tok_stride +
                                           h * p.q_head_stride + ch * 4);
    uint2 u;
    u.x = PackBf16(v.x, v.y);
    u.y = PackBf16(v.z, v.w);
    *reinterpret_cast<uint2*>(Qs + row * kLdK + ch * 4) = u;
  }
  __syncthreads();
  uint32_t qf[kDqk / 16][4];  // A fragments of this warp's 16 rows
  {
    const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = (lane >> 4) * 8;
#pragma unroll
    for (int ks = 0; ks < kDqk / 16; ++ks) Ldsm4(SmemAddr(Qs + r * kLdK + ks * 16 + c), qf[ks]);
  }

  float o[kDv / 8][4];
#pragma unroll
  for (int n = 0; n < kDv / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8 (log2 units)
  const float sl2 = p.softmax_scale * 1.4426950408889634f;
  const int row_lo = qt0 + warp * 16 + g;             // query index within the sequence
  const int qpos[2] = {pos0 + row_lo, pos0 + row_lo + 8};  // its position (keys <= it are visible)
  // ldmatrix lane offsets: K (B operand, non-transposed) and V (B operand, transposed).
  const int k_row = (lane & 7) + ((lane >> 4) << 3), k_col = ((lane >> 3) & 1) * 8;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;

  for (int kt = 0; kt < n_kt; ++kt) {
    CpAsyncWaitAll();
    __syncthreads();  // tile kt visible to all; every warp is done with tile kt - 1 and with Qs
    if (kt + 1 < n_kt) load_kv(kt + 1, smem + ((kt + 1) & 1) * kStage);
    const bf16* Ks = smem + (kt & 1) * kStage;
    const bf16* Vs = Ks + kBK * kLdK;

    float sc[kBK / 8][4];
#pragma unroll
    for (int n = 0; n < kBK / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kDqk / 16; ++ks) {
#pragma unroll
      for (int np = 0; np < kBK / 16; ++np) {
        uint32_t b[4];
        Ldsm4(SmemAddr(Ks + (np * 16 + k_row) * kLdK + ks * 16 + k_col), b);
        Mma(sc[2 * np], qf[ks], b[0], b[1]);
        Mma(sc[2 * np + 1], qf[ks], b[2], b[3]);
      }
    }
    // Causal / end-of-sequence mask, only where some key of the tile is invisible to some row.
    const int kbase = kt * kBK;
    if (kbase + kBK > nk || kbase + kBK - 1 > pos0 + qt0) {
#pragma unroll
      for (int n = 0; n < kBK / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kbase + n * 8 + 2 * t4 + (e & 1);
          if (key >= nk || key > qpos[e >> 1]) sc[n][e] = -INFINITY;
        }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kBK / 8; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(sc[n][0], sc[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(sc[n][2], sc[n][3]));
    }
    float alpha[2], mu[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r] * sl2);
      mu[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing visible yet stays at 0
      alpha[r] = exp2f(m[r] - mu[r]);           // 0 when m was -inf
      m[r] = m_new;
      l[r] *= alpha[r];
    }
    uint32_t pa[kBK / 16][4];  // P as A fragments (bf16)
#pragma unroll
    for (int n = 0; n < kBK / 8; ++n) {
      const float p0 = exp2f(fmaf(sc[n][0], sl2, -mu[0])), p1 = exp2f(fmaf(sc[n][1], sl2, -mu[0]));
      const float p2 = exp2f(fmaf(sc[n][2], sl2, -mu[1])), p3 = exp2f(fmaf(sc[n][3], sl2, -mu[1]));
      l[0] += p0 + p1;
      l[1] += p2 + p3;
      pa[n >> 1][(n & 1) * 2 + 0] = PackBf16(p0, p1);
      pa[n >> 1][(n & 1) * 2 + 1] = PackBf16(p2, p3);
    }
#pragma unroll
    for (int n = 0; n < kDv / 8; ++n) {
      o[n][0] *= alpha[0]; o[n][1] *= alpha[0];
      o[n][2] *= alpha[1]; o[n][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kDv / 16; ++dp) {
        uint32_t b[4];
        Ldsm4T(SmemAddr(Vs + (kk * 16 + v_row) * kLdV + dp * 16 + v_col), b);
        Mma(o[2 * dp], pa[kk], b[0], b[1]);
        Mma(o[2 * dp + 1], pa[kk], b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const float inv[2] = {l[0] > 0.f ? 1.f / l[0] : 0.f, l[1] > 0.f ? 1.f / l[1] : 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_lo + 8 * r;
    if (row >= nq) continue;
    TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(q0 + row) * p.o_tok_stride + h * p.o_head_stride;
#pragma unroll
    for (int n = 0; n < kDv / 8; ++n) Store2(out + n * 8 + 2 * t4, o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r]);
  }
}

template <int kWarps, typename TOut>
void Launch(const MlaPrefillTcParams& p) {
  constexpr size_t smem = SmemBytes<kWarps>();
  const dim3 grid(dev::CeilDiv(p.max_q_len, kWarps * 16), static_cast<unsigned>(p.heads), static_cast<unsigned>(p.num_seqs));
  DS_CUDA_CHECK(cudaFuncSetAttribute(MlaPrefillTcKernel<kWarps, TOut>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  MlaPrefillTcKernel<kWarps, TOut><<<grid, kWarps * 32, smem, p.stream>>>(p);
  DS_CUDA_CHECK_LAUNCH("MlaPrefillTcKernel");
}

bool Aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

bool MlaPrefillTcSupported(int64_t d_nope, int64_t d_rope, int64_t dv) {
  return d_nope == kDn && d_rope == kDr && dv == kDv;
}

void MlaPrefillAttentionTc(const MlaPrefillTcParams& p) {
  DS_CHECK(MlaPrefillTcSupported(p.d_nope, p.d_rope, p.dv))
      << "MlaPrefillAttentionTc: head dims must be nope 128, rope 64, v 128; got " << p.d_nope << ", " << p.d_rope
      << ", " << p.dv;
  DS_CHECK(p.block_q == 0 || p.block_q == 64 || p.block_q == 128) << "MlaPrefillAttentionTc: block_q " << p.block_q;
  DS_CHECK(Aligned(p.q, 16) && p.q_tok_stride % 4 == 0 && p.q_head_stride % 4 == 0)
      << "MlaPrefillAttentionTc: q must be 16-byte aligned with strides a multiple of 4";
  DS_CHECK(Aligned(p.k_nope, 16) && Aligned(p.k_rope, 16) && Aligned(p.v, 16) && p.kn_tok_stride % 8 == 0 &&
           p.kn_head_stride % 8 == 0 && p.kr_tok_stride % 8 == 0 && p.kr_head_stride % 8 == 0 &&
           p.v_tok_stride % 8 == 0 && p.v_head_stride % 8 == 0)
      << "MlaPrefillAttentionTc: k/v must be 16-byte aligned with strides a multiple of 8";
  DS_CHECK(Aligned(p.out, 8) && p.o_tok_stride % 2 == 0 && p.o_head_stride % 2 == 0)
      << "MlaPrefillAttentionTc: out strides must be even";
  DS_CHECK(p.num_seqs < 65536 && p.heads < 65536) << "MlaPrefillAttentionTc: grid too large";
  if (p.num_seqs == 0 || p.max_q_len == 0 || p.heads == 0) return;
  if (p.sm90 && MlaPrefillSm90Supported(p)) {
    MlaPrefillAttentionSm90(p);
    return;
  }
  const bool f32 = p.out_type == DTypeOut::kF32;
  if (p.block_q == 128) {
    f32 ? Launch<8, float>(p) : Launch<8, bf16>(p);
  } else {
    f32 ? Launch<4, float>(p) : Launch<4, bf16>(p);
  }
}

}  // namespace ds::cuda
