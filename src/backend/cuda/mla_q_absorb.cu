// MLA query absorption for decode-size passes: see mla_q_absorb.h. PTX sources: PTX ISA 8.x,
// "mma" (m16n8k16 .bf16, "Matrix Fragments for mma.m16n8k16").
#include "backend/cuda/mla_q_absorb.h"

#include <sstream>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/launch.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 8, kThreads = kWarps * 32, kRowsPerBlock = 16 * kWarps;
constexpr int kMaxTokens = 8, kMaxNope = 256;

__global__ void __launch_bounds__(kThreads) MlaQAbsorbKernel(MlaQAbsorbParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  // xs[t][d]: token t's bf16 q_nope of this block's head (zero for t >= tokens). Rows padded to
  // 64 mod 128 bytes: the 16-byte reads of tokens g and g + 1 (one quarter-warp) fall on
  // different banks.
  __shared__ __align__(16) bf16 xs[kMaxTokens][kMaxNope + 32];
  const int64_t h = blockIdx.y, nope = p.nope, T = p.tokens;
  for (int64_t i = threadIdx.x; i < kMaxTokens * nope; i += kThreads) {
    const int64_t t = i / nope, d = i % nope;
    xs[t][d] = t < T ? __float2bfloat16_rn(p.q[t * p.q_tok_stride + h * p.q_head_stride + d]) : __float2bfloat16_rn(0.f);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t c0 = int64_t{blockIdx.x} * kRowsPerBlock + int64_t{warp} * 16;
  if (c0 >= p.kv_lora) return;
  // Rows c0 .. c0 + 15 of W_UK_h^T against B's columns = the tokens (WarpTile16Cols: lane group
  // g streams token g's q_nope; tokens >= T are zeros).
  const bf16* w = p.w_uk_t + (h * p.kv_lora + c0) * nope;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  ptx::WarpTile16Cols(w + g * nope, w + (g + 8) * nope, &xs[g][0], static_cast<int>(nope / 32), d);
  // C fragment: d[0] / d[1] = row g, tokens 2q / 2q + 1; d[2] / d[3] = row g + 8.
  for (int j = 0; j < 2; ++j) {
    const int64_t t = 2 * q + j;
    if (t >= T) continue;
    float* o = p.out + t * p.out_tok_stride + h * p.out_head_stride + c0;
    o[g] = d[j];
    o[g + 8] = d[2 + j];
  }
}

}  // namespace

std::string MlaQAbsorbUnsupported(const MlaQAbsorbParams& p) {
  std::ostringstream why;
  if (p.tokens < 1 || p.tokens > kMaxTokens) why << "tokens " << p.tokens << " (1.." << kMaxTokens << "); ";
  if (p.heads < 1 || p.heads > 65535) why << "heads " << p.heads << "; ";
  if (p.nope < 32 || p.nope % 32 != 0 || p.nope > kMaxNope) why << "nope " << p.nope << " (a multiple of 32 up to 256); ";
  if (p.kv_lora < 16 || p.kv_lora % 16 != 0) why << "kv_lora " << p.kv_lora << " (a multiple of 16); ";
  if (!p.q || !p.w_uk_t || !p.out) why << "null pointer; ";
  if (reinterpret_cast<uintptr_t>(p.w_uk_t) % 16 != 0) why << "weights must be 16-byte aligned; ";
  return why.str();
}

void MlaQAbsorb(const MlaQAbsorbParams& p) {
  const std::string why = MlaQAbsorbUnsupported(p);
  DS_CHECK(why.empty()) << "MlaQAbsorb: " << why;
  const dim3 grid(static_cast<unsigned>((p.kv_lora + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(p.heads));
  LaunchKernel(MlaQAbsorbKernel, grid, dim3(kThreads), 0, p.stream, p.pdl, p);
  DS_CUDA_CHECK_LAUNCH("MlaQAbsorbKernel");
}

}  // namespace ds::cuda
