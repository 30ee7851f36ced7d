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
// Configurations (Fp8GemmSm90Config), with 128- or 144-column (weight-row) tiles: the blockwise
// mainloop keeps two fp32 accumulator sets (the K block's wgmma sums and the promoted total), so a
// consumer warpgroup holds about 64 x 128 of them in registers. Cooperative 128x128 (two
// warpgroups on one tile) with the stream-K scheduler, alone or in 2x1 clusters that share the
// weight tile (TMA multicast); ping-pong 64x128 (a tile per warpgroup, data-parallel); cooperative
// 128x144 data-parallel with the weight scales in finer column groups (w_scales_fine). Limits
// (Fp8GemmSm90Unsupported): sm_90 device, CUTLASS build, K % 128 == 0, N % 16 == 0, ldx, ldw %
// 16 == 0, ldy % 8 == 0, 16-byte aligned pointers (the scales too), a 256-byte aligned workspace, bf16 output, dimensions below 2^31;
// kCoop144DataParallel also needs w_scales_fine.
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
  kCoop144DataParallel = 4,   // cooperative 128x144x128, data-parallel tiles; the weight scales repeated per
                              // kFp8Sm90FineScaleCols columns (w_scales_fine): N = 576 (kv_a) is 4 column
                              // tiles, 32 x 4 = 128 tiles at M = 4096, one wave on 132 SMs
};

struct Fp8GemmSm90Params {
  GemmFp8Params g;                     // xq, x_scales, wq, y, M, N, K, strides, stream (w_scales unused)
  const float* w_scales_mn = nullptr;  // [ceil(K/128), ceil(N/128)] fp32
  const float* w_scales_fine = nullptr;  // kCoop144DataParallel: [ceil(K/128), N / kFp8Sm90FineScaleCols] fp32
                                         // (Fp8ExpandWeightScalesFine)
  Fp8GemmSm90Config config = Fp8GemmSm90Config::kCoop128StreamK;
  void* workspace = nullptr;           // device, 256-byte aligned, >= Fp8GemmSm90WorkspaceBytes
  size_t workspace_bytes = 0;
};

bool Fp8GemmSm90Available();

// The column granularity of kCoop144DataParallel's weight scales. Its 144-column tiles straddle
// the 128-column scale blocks, so CUTLASS's blockwise mainloop needs a granularity that divides
// 144; it also needs one that divides its per-thread column stride (18), so 2 (16 fails its
// layout divisibility check at compile time).
constexpr int kFp8Sm90FineScaleCols = 2;

// The weight scales of w_scales_mn ([ceil(K/128), ceil(N/128)], one per 128x128 block) repeated
// over kFp8Sm90FineScaleCols-column groups: out[kb * G + j] = w_scales_mn[kb * ceil(N/128) +
// j * kFp8Sm90FineScaleCols / 128], G = N / kFp8Sm90FineScaleCols, out sized [ceil(K/128), G]
// fp32 (the layout kCoop144DataParallel reads). Made once per weight (a load-time transform),
// on `stream`. Errors: CheckError (N not a multiple of kFp8Sm90FineScaleCols, null pointers,
// launch failure).
void Fp8ExpandWeightScalesFine(const float* w_scales_mn, float* out, int64_t N, int64_t K, cudaStream_t stream);
std::string Fp8GemmSm90Unsupported(const Fp8GemmSm90Params& p);
size_t Fp8GemmSm90WorkspaceBytes(int64_t M, int64_t N, int64_t K, Fp8GemmSm90Config config);
void Fp8GemmSm90(const Fp8GemmSm90Params& p);

}  // namespace ds::cuda
