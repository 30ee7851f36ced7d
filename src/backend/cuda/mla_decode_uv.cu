// The W_UV epilogue of absorbed-MLA decode: see mla_decode_uv.h and MlaDecodeParams::uv_w.
#include "backend/cuda/mla_decode_uv.h"

#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mla_decode_merge.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

constexpr int kV = 512;                  // kv_lora (the latent width)
constexpr int kThreads = 256;            // 8 warps; the merge runs on the first kV / 4
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 4;                 // W_UV rows per warp per pass (8 16-byte loads in flight a lane)
constexpr int kMaxParts = 4;
constexpr int kSmemSplits = 1024;        // the merge's weights in shared memory up to this many splits

// Grid (T, H, parts). Phase 1 (threads < 128, 4 latent columns each): the combine kernels'
// merge (MlaDecodeTcCombineFast / MlaDecodeSm90Combine: weights exp(lse_s - max), sums in split
// order; up to kSmemSplits the LSEs loaded by every thread and the weights kept in shared memory,
// 16 splits' partial loads in flight; beyond, mla::MergeSplits), rounded to bf16 as out_type kBF16 would store it, into
// shared memory (kPreload: each warp's first 4 W_UV rows already loaded before it). Phase 2: warp w
// projects rows n0 + 32 i + 4 w .. + 3 of this part (lane l takes
// k = 8 l .. 8 l + 7 and 256 + 8 l .. + 7: two 16-byte loads a row), fp32 FMAs in k order per
// lane, then a butterfly over the warp (WarpSum).
// kDivide: the CUDA-core path's combine (MlaDecodeCombineKernel) divides by the weight sum
// where the tensor-core paths multiply by its inverse; the merge follows the path it replaces.
template <bool kOutBf16, bool kDivide, bool kPreload>
__global__ void __launch_bounds__(kThreads) MlaDecodeCombineUvKernel(const MlaDecodeParams p, int max_splits,
                                                                      int rows_per_part) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  __shared__ __align__(16) float s_o[kV];
  __shared__ float s_w[kSmemSplits];  // the splits' LSEs, then their weights
  const int t = blockIdx.x, h = blockIdx.y, part = blockIdx.z;
  const int tid = threadIdx.x;
  // kPreload (MlaDecodeParams::uv_preload): each warp's first pass of W_UV rows, loaded before the
  // merge (they do not depend on it: their DRAM latency then overlaps the merge's L2 round trips
  // instead of following them; 96 registers against 62). The same values and arithmetic; without
  // it the kernel's code is as before (SASS checked).
  uint4 pre[kRows][2];
  if constexpr (kPreload) {
    const int n0 = part * rows_per_part, nb = n0 + (tid >> 5) * kRows;
    const int n1 = static_cast<int>(std::min<int64_t>(p.uv_n, n0 + rows_per_part));
    const __nv_bfloat16* wh = p.uv_w + h * p.uv_head_stride;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int n = nb + r;
      if (n < n1) {
        const __nv_bfloat16* row = wh + static_cast<int64_t>(n) * p.uv_ld;
        pre[r][0] = *reinterpret_cast<const uint4*>(row + 8 * (tid & 31));
        pre[r][1] = *reinterpret_cast<const uint4*>(row + 256 + 8 * (tid & 31));
      } else {
        pre[r][0] = pre[r][1] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
  const int64_t base = (static_cast<int64_t>(t) * p.heads + h) * max_splits;
  const float* lse = p.workspace + p.num_tokens * p.heads * max_splits * kV + base;
  // Up to kSmemSplits splits (session 35): the weights in shared memory, the LSEs read in one round
  // (mla::SplitWeightsToSmem / MergeSplitsSmemWeights: MergeSplits' bits with fewer round trips).
  const bool smem_merge = max_splits <= kSmemSplits;
  if (smem_merge) mla::SplitWeightsToSmem(lse, max_splits, s_w, kThreads);
  if (tid < kV / 4) {
    const int d = tid * 4;
    float4 acc;
    float wsum;
    if (smem_merge) mla::MergeSplitsSmemWeights(p.workspace, s_w, base, max_splits, kV, d, &acc, &wsum);
    else mla::MergeSplits(p.workspace, lse, base, max_splits, kV, d, &acc, &wsum);
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    const auto fin = [&](float a) { return kDivide ? (wsum > 0.f ? a / wsum : 0.f) : a * inv; };
    s_o[d + 0] = __bfloat162float(__float2bfloat16_rn(fin(acc.x)));
    s_o[d + 1] = __bfloat162float(__float2bfloat16_rn(fin(acc.y)));
    s_o[d + 2] = __bfloat162float(__float2bfloat16_rn(fin(acc.z)));
    s_o[d + 3] = __bfloat162float(__float2bfloat16_rn(fin(acc.w)));
  }
  __syncthreads();
  const int warp = tid >> 5, lane = tid & 31;
  float xo[16];
  mla::UvLaneColumns(s_o, lane, xo);
  const int n0 = part * rows_per_part;
  const int n1 = static_cast<int>(std::min<int64_t>(p.uv_n, n0 + rows_per_part));
  const __nv_bfloat16* wh = p.uv_w + h * p.uv_head_stride;
  for (int nb = n0 + warp * kRows; nb < n1; nb += kWarps * kRows) {
    uint4 wv[kRows][2];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int n = nb + r;
      if (kPreload && nb == n0 + warp * kRows) {
        wv[r][0] = pre[r][0];
        wv[r][1] = pre[r][1];
      } else if (n < n1) {
        const __nv_bfloat16* row = wh + static_cast<int64_t>(n) * p.uv_ld;
        wv[r][0] = *reinterpret_cast<const uint4*>(row + 8 * lane);
        wv[r][1] = *reinterpret_cast<const uint4*>(row + 256 + 8 * lane);
      } else {
        wv[r][0] = wv[r][1] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float acc = dev::WarpSum(mla::UvLaneDot(xo, wv[r][0], wv[r][1]));
      const int n = nb + r;
      if (lane == 0 && n < n1) {
        const int64_t o = static_cast<int64_t>(t) * p.uv_tok_stride + static_cast<int64_t>(h) * p.uv_n + n;
        if constexpr (kOutBf16) static_cast<__nv_bfloat16*>(p.uv_out)[o] = __float2bfloat16_rn(acc);
        else static_cast<float*>(p.uv_out)[o] = acc;
      }
    }
  }
}

}  // namespace

void CheckMlaDecodeUv(const MlaDecodeParams& p) {
  DS_CHECK(p.kv_lora == kV) << "MLA decode W_UV epilogue: kv_lora must be " << kV << ", got " << p.kv_lora;
  DS_CHECK(p.uv_n >= 1 && p.uv_ld >= kV && p.uv_ld % 8 == 0 && p.uv_head_stride % 8 == 0 &&
           reinterpret_cast<uintptr_t>(p.uv_w) % 16 == 0)
      << "MLA decode W_UV epilogue: uv_n " << p.uv_n << ", uv_ld " << p.uv_ld << " (>= 512, % 8), uv_head_stride "
      << p.uv_head_stride << " (% 8) and a 16-byte aligned uv_w";
  DS_CHECK(p.uv_out != nullptr && p.uv_tok_stride >= p.heads * p.uv_n)
      << "MLA decode W_UV epilogue: uv_out missing or uv_tok_stride " << p.uv_tok_stride << " < heads x uv_n";
  DS_CHECK(p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0)
      << "MLA decode W_UV epilogue: needs a 16-byte aligned workspace (every split writes its partial)";
  DS_CHECK(p.heads < 65536 && p.num_tokens < (int64_t{1} << 31)) << "MLA decode W_UV epilogue: grid";
}

void MlaDecodeCombineUv(const MlaDecodeParams& p, int max_splits, bool divide) {
  if (p.num_tokens == 0) return;
  // Parts per head: up to 4 while the grid stays within ~2 blocks per SM and a part keeps >= 16 rows.
  const int64_t th = p.num_tokens * p.heads, slots = 2 * static_cast<int64_t>(std::max(1, CurrentDeviceProps().sms));
  int parts = 1;
  while (parts < kMaxParts && th * parts * 2 <= slots && p.uv_n / (parts * 2) >= 16) parts *= 2;
  const int rows_per_part = static_cast<int>((p.uv_n + parts - 1) / parts);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.heads), static_cast<unsigned>(parts));
  const auto pick = [&](auto preload) {
    constexpr bool kP = decltype(preload)::value;
    return p.uv_out_bf16 ? (divide ? MlaDecodeCombineUvKernel<true, true, kP> : MlaDecodeCombineUvKernel<true, false, kP>)
                         : (divide ? MlaDecodeCombineUvKernel<false, true, kP> : MlaDecodeCombineUvKernel<false, false, kP>);
  };
  const auto kernel = p.uv_preload ? pick(std::true_type{}) : pick(std::false_type{});
  LaunchKernel(kernel, grid, kThreads, 0, p.stream, p.pdl, p, max_splits, rows_per_part);
  DS_CUDA_CHECK_LAUNCH("MlaDecodeCombineUvKernel");
}

}  // namespace ds::cuda
