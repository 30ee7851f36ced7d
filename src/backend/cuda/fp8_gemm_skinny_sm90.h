// FP8 block-scaled dense GEMM for few rows (M <= 64) on Hopper (sm_90a): the same contract as
// GemmFp8 (gemm.h), y[M, N] = x[M, K] @ w[N, K]^T with DeepSeek-V3's block scales (DeepSeek-V3
// tech report section 3.3.2: 1x128 activation groups, 128x128 weight blocks, partial products
// over each 128-wide K block promoted to fp32 with both scales), computed as its transpose
// y^T[N, Mp] = w[N, K] @ x[Mp, K]^T ("swap AB"): the weights fill the wgmma M side in tiles of
// 128 output features, the Mp = Fp8PaddedM(M) rows the narrow N side (tile 16, 32 or 64), so a
// decode-size batch wastes no tensor-core rows. Built from the CUTLASS 3.x/4.x library API (our
// configuration of its sm90 blockwise-scaled TMA warp-specialised kernels, cooperative or
// ping-pong, headers
// from scripts/get_cutlass.sh, compiled only with DS_HAVE_CUTLASS) with the stream-K tile
// scheduler, so that weight matrices of a few 128-row tiles still spread over every SM (split-K
// partials reduced deterministically in `workspace`).
//
// Operands (GemmFp8Params, gemm.h): xq [Mp, K] e4m3 with ldx, x_scales group-major
// [ceil(K/128), Mp]; wq [N, K] e4m3 with ldw; y [Mp, N] (bf16) with ldy, rows >= M garbage.
// The weight scales are taken transposed, w_scales_mn [ceil(K/128), ceil(N/128)] (CUTLASS's
// sm90 blockwise mainloop reads only MN-major scales): Fp8TransposeWeightScales writes them
// from the checkpoint layout once per weight. Tiles of 128 weight rows (cooperative or
// ping-pong), or of 64 with ping-pong (scale_rows 64: the scales repeated per 64-row half).
//
// Limits (Fp8SkinnyGemmSm90Unsupported says which one fails): sm_90 device and a CUTLASS
// build; 1 <= M <= 64; K % 128 == 0; N % 16 == 0; ldx, ldw % 16 == 0 (TMA row pitch); ldy % 8
// == 0; 16-byte aligned pointers (the scales too); a 256-byte aligned workspace; bf16 output
// (fp32 too with 64-row ping-pong tiles: the runner's W8A8 form); dimensions below 2^31.
// Errors: CheckError (unsupported params, CUTLASS or CUDA failures).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/gemm.h"

namespace ds::cuda {

// How the output tiles are spread over the SMs (CUTLASS's stream-K scheduler modes).
enum class SkinnyDecomposition : int { kHeuristic = 0, kDataParallel = 1, kSplitK = 2, kStreamK = 3 };

struct Fp8SkinnyGemmParams {
  GemmFp8Params g;                 // xq, x_scales, wq, y, M, N, K, strides, stream (w_scales unused)
  const float* w_scales_mn = nullptr;  // [ceil(K/128), ceil(N/scale_rows)] fp32 (Fp8TransposeWeightScales)
  int scale_rows = 128;            // w_scales_mn's rows per scale: 128, or 64 for 64-row tiles (ping-pong only)
  // 64-row tiles only: K split into ksplit equal ranges (multiples of 128) as CUTLASS's batch
  // dimension, their fp32 partials [ksplit][Mp][N] in the workspace, then added in split order
  // into y by a second launch (deterministic). For matrices of few 64-row tiles (q_a, kv_a).
  // The measured-best form per shape: 64-row ping-pong tiles, data-parallel, ksplit =
  // Fp8SkinnyAutoKsplit(M, N, K) (host_plans.h).
  int ksplit = 1;
  SkinnyDecomposition decomposition = SkinnyDecomposition::kHeuristic;
  int splits = 1;                  // kSplitK only: K splits per output tile
  bool pingpong = false;           // CUTLASS's ping-pong schedule (a tile per consumer warpgroup;
                                   // kDataParallel only: its kernel takes no stream-K scheduler)
  void* workspace = nullptr;       // device, 256-byte aligned, >= Fp8SkinnyGemmSm90WorkspaceBytes
  size_t workspace_bytes = 0;
};

// True when this build has the kernel (CUTLASS headers found) and the current device is sm_90.
bool Fp8SkinnyGemmSm90Available();

// The operand checks both CUTLASS FP8 GEMMs share (fp8_gemm_sm90.h too): K % 128, N % 16, the
// leading dimensions, 16-byte alignment of every operand and scale, bf16 output (or fp32 where
// f32_out_ok). Empty when they hold, else why not.
std::string Fp8GemmOperandsUnsupported(const GemmFp8Params& g, const float* w_scales_mn, bool f32_out_ok);

// Empty when Fp8SkinnyGemmSm90 takes these params, else why not (the workspace is not checked).
std::string Fp8SkinnyGemmSm90Unsupported(const Fp8SkinnyGemmParams& p);

// Device workspace bytes for this shape and decomposition on the current device (0 without
// CUTLASS). Errors: CheckError on an unsupported shape.
size_t Fp8SkinnyGemmSm90WorkspaceBytes(int64_t M, int64_t N, int64_t K, SkinnyDecomposition d, int splits,
                                       bool pingpong = false, int scale_rows = 128, int ksplit = 1);

void Fp8SkinnyGemmSm90(const Fp8SkinnyGemmParams& p);

// out[kb * ceil(N/scale_rows) + j] = w_scales[(j * scale_rows / 128) * w_scale_ld + kb]: the
// checkpoint's [N/128, K/128] block scales (rows padded to w_scale_ld) transposed to the MN-major
// layout above, each block's scale repeated for its 64-row halves when scale_rows is 64.
void Fp8TransposeWeightScales(const float* w_scales, int64_t w_scale_ld, int64_t N, int64_t K, float* out,
                              cudaStream_t stream, int scale_rows = 128);

}  // namespace ds::cuda
