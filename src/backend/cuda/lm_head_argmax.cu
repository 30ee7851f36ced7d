#include "backend/cuda/lm_head_argmax.h"

#include <cmath>
#include <cstdint>
#include <sstream>

#include "backend/cuda/argmax_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/rmsnorm.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256, kWarps = kThreads / 32, kBlocksPerSm = 2;
constexpr int kParts = kWarps;     // a tile's K split over the block's 8 warps
constexpr int kMaxRounds = 40;     // tiles a block (N <= 40 * 16 * grid: V3's 129,280 on 132 SMs = 31)
constexpr int kMaxK = 16384;       // x in shared memory: 32 KB
constexpr int kMaxNormK = 8192;    // in_residual: the final norm's row in registers (2 x 8 float4s a thread)

// kNorm: x computed from p.in_residual by the final norm in every block (lm_head_argmax.h); a
// separate instantiation, so the plain kernel's code stays as it was.
template <bool kNorm>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) LmHeadArgmaxKernel(LmHeadArgmaxParams p) {
  extern __shared__ uint4 smem4[];
  bf16* xs = reinterpret_cast<bf16*>(smem4);  // [K]
  __shared__ float s_part[kMaxRounds][kWarps][16];
  __shared__ float sv[kWarps];
  __shared__ int32_t si[kWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int grid = static_cast<int>(gridDim.x);
  const int64_t K = p.k, tiles = p.n / 16, kw = K / kParts;
  if constexpr (kNorm) {
    // The final norm (rmsnorm.cuh's block form: RmsNorm's operations, the block's sum order).
    norm::BlockRmsNormRowToBf16<kMaxNormK / 4 / kThreads, kThreads>(p.in_residual, p.norm_w, K, p.eps, xs, sv);
  } else {
    for (int64_t i = threadIdx.x; i < K / 8; i += kThreads) smem4[i] = reinterpret_cast<const uint4*>(p.x)[i];
  }
  __syncthreads();
  // Tile t (rows 16 t .. 16 t + 15) on block t % grid, round t / grid; warp `warp` takes its
  // K part [warp kw, (warp + 1) kw).
  int r = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += grid, ++r) {
    const bf16* wa = p.w + (16 * t + g) * K + warp * kw;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    ptx::WarpTile16Cols<1>(wa, wa + 8 * K, xs + warp * kw, static_cast<int>(kw / 32), d);
    if (q == 0) {
      s_part[r][warp][g] = d[0];       // row 16 t + g
      s_part[r][warp][8 + g] = d[2];   // row 16 t + 8 + g
    }
  }
  __syncthreads();
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  for (int idx = threadIdx.x; idx < r * 16; idx += kThreads) {
    const int rr = idx / 16, c = idx % 16;
    float sum = 0.f;
#pragma unroll
    for (int pp = 0; pp < kParts; ++pp) sum += s_part[rr][pp][c];
    const int64_t row = 16 * (blockIdx.x + int64_t{grid} * rr) + c;
    p.logits[row] = sum;
    dev::ArgmaxTake(sum, static_cast<int32_t>(row), bv, bi);
  }
  dev::ArgmaxBlockReduce<kWarps>(bv, bi, sv, si);
  float* part_v = static_cast<float*>(p.ws);
  int32_t* part_i = reinterpret_cast<int32_t*>(part_v + grid);
  dev::ArgmaxFinishAcrossBlocks<kWarps>(bv, bi, blockIdx.x, grid, part_v, part_i, p.counter, p.out_id, sv, si);
}

int GridBlocks() { return CurrentDeviceProps().sms * kBlocksPerSm; }

}  // namespace

size_t LmHeadArgmaxWorkspaceBytes() { return static_cast<size_t>(GridBlocks()) * 8; }

std::string LmHeadArgmaxSupported(int64_t n, int64_t k) {
  std::ostringstream why;
  if (k <= 0 || k % (kParts * 32) != 0 || k > kMaxK) why << "K " << k << " (a multiple of 256, <= " << kMaxK << "); ";
  if (n <= 0 || n % 16 != 0) why << "N " << n << " (a multiple of 16); ";
  const int64_t grid = GridBlocks();
  if (n > 0 && (n / 16 + grid - 1) / grid > kMaxRounds) why << "N " << n << " above " << kMaxRounds << " tiles a block; ";
  if (n >= (int64_t{1} << 31)) why << "N " << n << " (ids are int32); ";
  return why.str();
}

bool LmHeadArgmaxNormSupported(int64_t k) { return k > 0 && k <= kMaxNormK; }

void LmHeadArgmax(const LmHeadArgmaxParams& p) {
  const std::string why = LmHeadArgmaxSupported(p.n, p.k);
  DS_CHECK(why.empty()) << "LmHeadArgmax: " << why;
  const bool norm = p.in_residual != nullptr;
  DS_CHECK((norm ? p.norm_w != nullptr : p.x != nullptr) && p.w && p.logits && p.out_id && p.ws && p.counter)
      << "LmHeadArgmax: null pointer";
  DS_CHECK(!norm || (reinterpret_cast<uintptr_t>(p.in_residual) % 16 == 0 && reinterpret_cast<uintptr_t>(p.norm_w) % 16 == 0))
      << "LmHeadArgmax: in_residual and norm_w must be 16-byte aligned";
  DS_CHECK(!norm || LmHeadArgmaxNormSupported(p.k)) << "LmHeadArgmax: the final norm in the kernel takes K <= " << kMaxNormK
                                                   << ", not " << p.k;
  const int smem = static_cast<int>(p.k * 2);
  const auto kernel = norm ? LmHeadArgmaxKernel<true> : LmHeadArgmaxKernel<false>;
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), smem);
  kernel<<<GridBlocks(), kThreads, smem, p.stream>>>(p);
  DS_CUDA_CHECK_LAUNCH("LmHeadArgmaxKernel");
}

}  // namespace ds::cuda
