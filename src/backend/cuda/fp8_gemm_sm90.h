// FP8 block-scaled dense GEMM for prefill sizes on Hopper (sm_90a): GemmFp8's contract
// (gemm.h), y[M, N] = x[M, K] @ w[N, K]^T with DeepSeek-V3's block scales (tech report section
// 3.3.2: 1x128 activation groups, 128x128 weight blocks, each 128-wide K block's partial sums
// promoted to fp32 with both scales), through our configurations of CUTLASS's sm90
// blockwise-scaled TMA warp-specialised kernels (headers from scripts/get_cutlass.sh; compiled only
// with DS_HAVE_CUTLASS). For the shapes where cuBLASLt's block-scaled kernels stay below 85% of
// the FP8 ceiling (issue 5: kv_a_proj_with_mqa, N = 576, and kv_b_proj, K = 512, at M >= 4096).
//
// Operands as GemmFp8Params: xq [Mp, K] e4m3 (ldx), x_scales group-major [ceil(K/128), Mp]
// (Mp = Fp8PaddedM(M)); wq [N, K] e4m3 (ldw); y [Mp, N] bf16 (ldy). The weight scales come
// transposed, w_scales_mn [ceil(K/128), ceil(N/128)] (Fp8TransposeWeightScales in
// fp8_gemm_skinny_sm90.h, scale_rows 128), the layout CUTLASS's sm90 mainloop reads.
//
// Configurations (Fp8GemmSm90Config), all with 128-column (weight-row) tiles: the blockwise
// mainloop keeps two fp32 accumulator sets (the K block's wgmma sums and the promoted total), so a
// consumer warpgroup holds at most 64 x 128 of them in registers. Cooperative 128x128 (two
// warpgroups on one tile) with the stream-K scheduler, alone or in 2x1 clusters that share the
// weight tile (TMA multicast); ping-pong 64x128 (a tile per warpgroup, data-parallel). Limits
// (Fp8GemmSm90Unsupported): sm_90 device, CUTLASS build, K % 128 == 0, N % 16 == 0, ldx, ldw %
// 16 == 0, ldy % 8 == 0, 16-byte aligned pointers (the scales too), a 256-byte aligned workspace, bf16 output, dimensions below 2^31.
// Errors: CheckError.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/gemm.h"

namespace ds::cuda {

enum class Fp8GemmSm90Config : int {
  kCoop128StreamK = 0,        // cooperative 128x128x128, stream-K (CUTLASS's heuristic decomposition)
  kCoop128Cluster2 = 1,       // the same in 2x1 clusters (the weight tile multicast to both)
  kPingpong64 = 2,            // ping-pong 64x128x128, data-parallel tiles
  kCoop128DataParallel = 3,   // cooperative 128x128x128, data-parallel tiles (reference)
};

struct Fp8GemmSm90Params {
  GemmFp8Params g;                     // xq, x_scales, wq, y, M, N, K, strides, stream (w_scales unused)
  const float* w_scales_mn = nullptr;  // [ceil(K/128), ceil(N/128)] fp32
  Fp8GemmSm90Config config = Fp8GemmSm90Config::kCoop128StreamK;
  void* workspace = nullptr;           // device, 256-byte aligned, >= Fp8GemmSm90WorkspaceBytes
  size_t workspace_bytes = 0;
};

bool Fp8GemmSm90Available();
std::string Fp8GemmSm90Unsupported(const Fp8GemmSm90Params& p);
size_t Fp8GemmSm90WorkspaceBytes(int64_t M, int64_t N, int64_t K, Fp8GemmSm90Config config);
void Fp8GemmSm90(const Fp8GemmSm90Params& p);

}  // namespace ds::cuda
