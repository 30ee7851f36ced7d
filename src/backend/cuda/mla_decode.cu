#include "backend/cuda/mla_decode.h"
#include "backend/cuda/mla_decode_uv.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace ds::cuda {
namespace {

constexpr int kHeadsPerBlock = 8;   // one warp per head
constexpr int kKeysPerTile = 32;
constexpr int kMaxQK = 640, kMaxV = 512;
constexpr int kQPerLane = kMaxQK / 32, kVPerLane = kMaxV / 32;

__device__ __forceinline__ int FindSeq(const int32_t* qs, int S, int t) {
  int lo = 0, hi = S - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (qs[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// kEmu: the tensor-core path's numerics (MlaDecodeParams::emulate_tc_rounding): base-2 online
// softmax over the scores of (optionally bf16-rounded) unscaled q, optionally bf16-rounded
// probabilities in P V, `chunk` keys per split, `tile` keys per online-softmax update (the tc
// plan, or the sm90 kernel's when it is selected: MlaDecodeTcChunk).
template <bool kEmu>
__global__ void __launch_bounds__(kHeadsPerBlock * 32) MlaDecodeSplitKernel(MlaDecodeParams p, int max_splits,
                                                                            int chunk, int tile) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  __shared__ __align__(16) __nv_bfloat16 Ks[kKeysPerTile * kMaxQK];
  const int t = blockIdx.x, split = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = blockIdx.y * kHeadsPerBlock + warp;
  const int D = static_cast<int>(p.kv_lora + p.rope_dim), V = static_cast<int>(p.kv_lora);
  const int s = FindSeq(p.query_start, static_cast<int>(p.num_seqs), t);
  const int q_len = p.query_start[s + 1] - p.query_start[s];
  const int i = t - p.query_start[s];
  const int limit = p.context_lens[s] - (q_len - 1 - i);  // keys 0..limit-1
  const int kbeg = split * chunk;
  const int kend = min(limit, kbeg + chunk);
  const bool round_q = kEmu && (p.emulate_tc_rounding & 1), round_p = kEmu && (p.emulate_tc_rounding & 2);
  const float sl2 = p.softmax_scale * 1.4426950408889634f;  // kEmu: scores in base 2
  const int64_t part = (static_cast<int64_t>(t) * p.heads + h) * max_splits + split;
  float* part_o = p.workspace + part * V;
  float* part_lse = p.workspace + static_cast<int64_t>(p.num_tokens) * p.heads * max_splits * V + part;
  if (kbeg >= kend) {  // uniform over the block
    if (h < p.heads && lane == 0) *part_lse = -INFINITY;
    return;
  }
  const bool head_ok = h < p.heads;
  float q[kQPerLane];
  const float* qp = p.q + static_cast<int64_t>(t) * p.q_tok_stride + (head_ok ? h : 0) * p.q_head_stride;
#pragma unroll
  for (int j = 0; j < kQPerLane; ++j) {
    const int d = lane + 32 * j;
    if constexpr (kEmu) q[j] = d < D ? (round_q ? __bfloat162float(__float2bfloat16_rn(qp[d])) : qp[d]) : 0.f;
    else q[j] = d < D ? qp[d] * p.softmax_scale : 0.f;
  }
  float acc[kVPerLane];
#pragma unroll
  for (int j = 0; j < kVPerLane; ++j) acc[j] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int32_t* bt = p.block_table + static_cast<int64_t>(s) * p.max_blocks;
  const int half_d = D / 2;
  // tile <= 2 * kKeysPerTile keys per softmax update (64: the sm90 kernel's), scored and
  // accumulated in sub-tiles of <= kKeysPerTile keys (key j of the tile: lane j % 32, slot j / 32).
  for (int k0 = kbeg; k0 < kend; k0 += tile) {
    const int nkeys = min(tile, kend - k0);
    const int nsub = (nkeys + kKeysPerTile - 1) / kKeysPerTile;
    auto load_sub = [&](int sub) {  // keys k0 + 32 sub .. (nk of them) -> Ks
      const int nk = min(kKeysPerTile, nkeys - sub * kKeysPerTile);
      __syncthreads();
      for (int idx = threadIdx.x; idx < nk * half_d; idx += blockDim.x) {
        const int j = idx / half_d, e = idx % half_d;
        const int kp = k0 + sub * kKeysPerTile + j;
        const int64_t row = static_cast<int64_t>(bt[kp / p.block_size]) * p.block_size + kp % p.block_size;
        reinterpret_cast<uint32_t*>(Ks + j * D)[e] = reinterpret_cast<const uint32_t*>(p.cache + row * D)[e];
      }
      __syncthreads();
      return nk;
    };
    float my_s[2] = {-INFINITY, -INFINITY};
    for (int sub = 0; sub < nsub; ++sub) {
      const int nk = load_sub(sub);
      for (int j = 0; j < nk; ++j) {
        const __nv_bfloat16* kr = Ks + j * D;
        float part_s = 0.f;
#pragma unroll
        for (int jj = 0; jj < kQPerLane; ++jj) {
          const int d = lane + 32 * jj;
          if (d < D) part_s += q[jj] * __bfloat162float(kr[d]);
        }
        part_s = dev::WarpSum(part_s);
        if (kEmu) part_s *= sl2;
        if (lane == j) my_s[sub] = part_s;
      }
    }
    const float tmax = dev::WarpMax(fmaxf(my_s[0], my_s[1]));
    const float m_new = fmaxf(m, tmax);
    // m_new is finite here
    const float alpha = kEmu ? exp2f(m - m_new) : expf(m - m_new);
    float pj[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) pj[u] = my_s[u] == -INFINITY ? 0.f : kEmu ? exp2f(my_s[u] - m_new) : expf(my_s[u] - m_new);
    l = l * alpha + dev::WarpSum(pj[0] + pj[1]);
    m = m_new;
#pragma unroll
    for (int jj = 0; jj < kVPerLane; ++jj) acc[jj] *= alpha;
    for (int sub = nsub - 1; sub >= 0; --sub) {  // the last sub-tile is still in Ks
      const int nk = sub == nsub - 1 ? min(kKeysPerTile, nkeys - sub * kKeysPerTile) : load_sub(sub);
      for (int j = 0; j < nk; ++j) {
        float pv = __shfl_sync(0xffffffffu, sub == 0 ? pj[0] : pj[1], j);
        if (round_p) pv = __bfloat162float(__float2bfloat16_rn(pv));
        const __nv_bfloat16* kr = Ks + j * D;
#pragma unroll
        for (int jj = 0; jj < kVPerLane; ++jj) {
          const int d = lane + 32 * jj;
          if (d < V) acc[jj] += pv * __bfloat162float(kr[d]);
        }
      }
    }
  }
  if (!head_ok) return;
  const float inv = 1.f / l;
#pragma unroll
  for (int jj = 0; jj < kVPerLane; ++jj) {
    const int d = lane + 32 * jj;
    if (d < V) part_o[d] = acc[jj] * inv;
  }
  if (lane == 0) *part_lse = kEmu ? (m + log2f(l)) * 0.6931471805599453f : m + logf(l);
}

template <typename TOut>
__global__ void MlaDecodeCombineKernel(MlaDecodeParams p, int max_splits) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int t = blockIdx.x, h = blockIdx.y;
  const int V = static_cast<int>(p.kv_lora);
  const int64_t base = (static_cast<int64_t>(t) * p.heads + h) * max_splits;
  const float* lse = p.workspace + static_cast<int64_t>(p.num_tokens) * p.heads * max_splits * V + base;
  float gmax = -INFINITY;
  for (int s = 0; s < max_splits; ++s) gmax = fmaxf(gmax, lse[s]);
  float wsum = 0.f;
  for (int s = 0; s < max_splits; ++s) wsum += lse[s] == -INFINITY ? 0.f : expf(lse[s] - gmax);
  TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(t) * p.o_tok_stride + h * p.o_head_stride;
  for (int d = threadIdx.x; d < V; d += blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < max_splits; ++s) {
      if (lse[s] == -INFINITY) continue;
      acc += expf(lse[s] - gmax) * p.workspace[(base + s) * V + d];
    }
    out[d] = dev::FromF<TOut>(wsum > 0.f ? acc / wsum : 0.f);
  }
}

}  // namespace

int64_t MlaDecodeWorkspaceFloats(int64_t num_tokens, int64_t heads, int64_t kv_lora, int64_t max_context,
                                 int64_t kv_chunk) {
  const int64_t splits = std::max<int64_t>(1, (max_context + kv_chunk - 1) / kv_chunk);
  return num_tokens * heads * splits * (kv_lora + 1);
}

void MlaDecodeAttention(const MlaDecodeParams& p) {
  const int64_t D = p.kv_lora + p.rope_dim;
  DS_CHECK(D <= kMaxQK && p.kv_lora <= kMaxV && p.kv_lora % 2 == 0 && p.rope_dim % 2 == 0)
      << "MlaDecodeAttention: unsupported dims kv_lora=" << p.kv_lora << " rope=" << p.rope_dim;
  DS_CHECK(p.kv_chunk >= kKeysPerTile && p.kv_chunk % kKeysPerTile == 0) << "MlaDecodeAttention: kv_chunk";
  if (p.num_tokens == 0) return;
  if (p.uv_w != nullptr) CheckMlaDecodeUv(p);
  if (MlaDecodeTakesSm90(p)) {
    MlaDecodeAttentionSm90(p);
    return;
  }
  if (p.tensor_cores && p.emulate_tc_rounding == 0 && MlaDecodeTcSupported(p.kv_lora, p.rope_dim, p.block_size)) {
    MlaDecodeAttentionTc(p);
    return;
  }
  const bool emu = p.emulate_tc_rounding != 0;
  int tile = kKeysPerTile;
  const int64_t chunk = emu ? MlaDecodeTcChunk(p, &tile) : p.kv_chunk;  // tc / sm90 plan: a multiple of 32, >= kv_chunk
  DS_CHECK(tile >= 1 && tile <= 2 * kKeysPerTile) << "MlaDecodeAttention: emulated tile " << tile;
  const int max_splits = static_cast<int>(std::max<int64_t>(1, (p.max_context + chunk - 1) / chunk));
  DS_CHECK(max_splits < 65536) << "MlaDecodeAttention: context too long for the split grid";
  dim3 grid(p.num_tokens, dev::CeilDiv(p.heads, kHeadsPerBlock), max_splits);
  if (emu) LaunchKernel(MlaDecodeSplitKernel<true>, grid, kHeadsPerBlock * 32, 0, p.stream, p.pdl, p, max_splits, static_cast<int>(chunk), tile);
  else LaunchKernel(MlaDecodeSplitKernel<false>, grid, kHeadsPerBlock * 32, 0, p.stream, p.pdl, p, max_splits, static_cast<int>(chunk), tile);
  DS_CUDA_CHECK_LAUNCH("MlaDecodeSplitKernel");
  if (p.uv_w != nullptr) {  // the W_UV epilogue in place of the combine (kv_lora 512: the same layout)
    MlaDecodeCombineUv(p, max_splits, /*divide=*/true);
    return;
  }
  dim3 cgrid(p.num_tokens, p.heads);
  if (p.out_type == DTypeOut::kF32) LaunchKernel(MlaDecodeCombineKernel<float>, cgrid, 128, 0, p.stream, p.pdl, p, max_splits);
  else LaunchKernel(MlaDecodeCombineKernel<__nv_bfloat16>, cgrid, 128, 0, p.stream, p.pdl, p, max_splits);
  DS_CUDA_CHECK_LAUNCH("MlaDecodeCombineKernel");
}

}  // namespace ds::cuda
