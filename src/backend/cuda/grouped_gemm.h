// Grouped expert GEMM for MoE (our own kernels, bf16 tensor cores, fp32 accumulation): for each
// expert e and each permuted row r in [offsets[e], offsets[e+1]):
//   out[r, :] = a[r, :] @ w[e]^T,  w[e]: [N, K] (torch Linear layout).
// Segments must be padded to kGroupedGemmRowAlign rows (moe_permute.h does this), so each
// 64-row slot belongs to one expert. Weights are bf16, or FP8 e4m3 with the checkpoint's
// 128x128 block scales w_scales[e, n / 128, k / 128] (e4m3 converted to bf16 exactly in the
// kernel, the block scale applied in fp32; activations stay bf16, so no activation
// quantisation error is added). The expert offsets stay on the device: no host synchronisation.
//
// Kernels (docs/design/cuda_backend.md, "MoE grouped GEMM"):
//   - bf16 weights on sm_90 with CUTLASS built in: the wgmma grouped GEMM of
//     grouped_gemm_sm90.h when the caller passes GroupedGemmWorkspaceBytes(p) bytes of
//     workspace and its alignment rules hold (K, N, lda, ldo 16-byte rows; 16-byte aligned
//     pointers); sm90 = false turns it off;
//   - FP8 weights on sm_90 with CUTLASS built in, only when sm90_mixed is set (the runner
//     sets it by default, CudaRunnerOptions::sm90_mixed_gemm; verified on the H200, session 4): the wgmma mixed-input grouped GEMM of grouped_gemm_sm90_mixed.h
//     (bf16 activations x e4m3 weights, each weight dequantised to bf16 with its block scale
//     before the MMA: "scale-then-round", see that header for the error bound vs the mma.sync
//     kernel's per-K-block fp32 scaling) when the workspace is given and K % 128 == 0, N % 8 == 0
//     and the rows / pointers are 16-byte aligned;
//   - mma.sync m16n8k16, 128x128x64 tiles, 4-stage cp.async pipeline, persistent CTAs; used
//     whenever K % 8 == 0 (bf16) / K % 16 == 0 (fp8), lda % 8 == 0, a and w 16-byte aligned
//     and num_experts <= 1024;
//   - the original WMMA 64x64x32 kernel for everything else (or when force_wmma is set, which
//     tests and `dsinfer bench kernels` use to compare the two).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm.h"

namespace ds::cuda {

inline constexpr int kGroupedGemmRowAlign = 64;

struct GroupedGemmParams {
  const __nv_bfloat16* a; int64_t lda;  // [rows, K]
  const int32_t* offsets;               // [E + 1] device
  // Gathered rows (SkinnyGemm's grouped form only; GroupedGemm rejects it): row r of the
  // product reads a + a_rows[r] * lda instead of a + r * lda (a_rows: device int32 [max_rows];
  // the MoE decode path passes the tokens' rows and the permutation's src_row, moe_router_route.h,
  // instead of copying the rows into permuted order). nullptr: no gather.
  const int32_t* a_rows = nullptr;
  int64_t max_rows;                     // rows allocated (bounds the grid)
  const void* w; bool w_fp8 = false;    // [E, N, K]
  const float* w_scales = nullptr;      // fp8: [E, ceil(N/128), ceil(K/128)]
  int64_t num_experts, N, K;
  void* out; DTypeOut out_type = DTypeOut::kBF16; int64_t ldo;  // [rows, N]
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Honoured by SkinnyGemm only (the other kernels ignore it).
  bool pdl = false;
  bool force_wmma = false;              // use the WMMA kernel even where the mma.sync one applies
  bool sm90 = true;                     // allow the sm_90a (CUTLASS) kernel
  bool sm90_mixed = false;              // FP8 weights: allow the sm_90a mixed-input kernel
  void* workspace = nullptr;            // device, 256-byte aligned: for the sm_90a kernel
  size_t workspace_bytes = 0;
};
void GroupedGemm(const GroupedGemmParams& p);

// Device workspace the sm_90a kernel needs for these params (0 when it does not apply: no
// CUTLASS, not sm_90, misaligned, sm90 unset or force_wmma set; FP8 weights without sm90_mixed).
// Independent of pointers other than their alignment, so callers can size it before the GEMM
// (and before a graph capture).
size_t GroupedGemmWorkspaceBytes(const GroupedGemmParams& p);

}  // namespace ds::cuda
