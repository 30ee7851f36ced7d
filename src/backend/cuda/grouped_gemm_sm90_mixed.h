// Hopper (sm_90a) grouped GEMM for bf16 activations x FP8 e4m3 weights with DeepSeek-V3's
// 128x128 block scales: the default FP8 numerics (`--fp8-gemm kernel`: activations stay bf16)
// at prefill sizes, on wgmma tensor cores. Same contract as GroupedGemm (grouped_gemm.h): for
// each expert e and each row r in [offsets[e], offsets[e+1]):
//   out[r, n] = sum_k a[r, k] * wdq[e, n, k],
//   wdq[e, n, k] = bf16_rn( fp32(w[e, n, k]) * w_scales[e, n / 128, k / 128] )   (fp32 product)
// with fp32 accumulation; out fp32 or bf16 [rows, N] (leading dimension ldo). a: bf16 [rows, K]
// (lda); w: e4m3 [E, N, K] (torch Linear layout); w_scales: fp32 [E, ceil(N/128), ceil(K/128)]
// (the checkpoint's weight_scale_inv). Groups may be empty; segments need no padding (padded
// rows are computed like any other); rows outside every group and columns >= N are never
// written.
//
// Numerics ("scale-then-round", docs/design/cuda_backend.md "FP8 weights x bf16 activations on
// sm_90a"): each weight is dequantised to bf16 with its block scale before the MMA (one fp32
// multiply, one round to bf16), exactly what DeepSeek's reference weight_dequant and a
// dequantised bf16 checkpoint compute. The mma.sync kernel of grouped_gemm.cu instead applies the
// scale in fp32 to each 128-wide K block's partial sum (exact e4m3 weights); per weight the two
// differ by the bf16 rounding, |wdq - w*s| <= 2^-9 |w*s| (+ 2^-24 for the fp32 product), so
// per output |out_new - out_old| <= 2^-9 sum_k |a_k w_k s| (+ fp32 accumulation-order noise):
// the bf16 floor the activations already have. Tests: an exact CPU emulation of wdq
// (tests/cuda/test_grouped_gemm_sm90_mixed.cpp).
//
// Kernel: CUTLASS 4.x's sm90 ptr-array grouped mixed-input collective ("RS" wgmma: the narrow
// operand is loaded by TMA, converted and scaled in registers by the consumer warpgroups, then
// fed to wgmma from registers) with the weights as CUTLASS's A operand: each group computes
// the transposed product D^T[N, rows_e] = W_e[N, K] . A_e^T, so the e4m3 operand is A (no
// operand swap inside CUTLASS) and the output is written column-major = out row-major. Per-
// group scales along K with chunk (group) size 128; CUTLASS wants them per row of W
// ([K/128][N], N contiguous), so a kernel of ours expands the 128x128 block scales into the
// workspace each call (E * N * K/128 floats, e.g. 29 MB for 32 V3 experts' w13). Tiles 128 (N)
// x 128 or 256 (rows) x 64 (K) (Sm90MixedTile; auto: 256 when the groups average >= 256
// allocated rows), cooperative (two consumer warpgroups), cluster 1x1, persistent.
//
// Graph-safe: the offsets stay on the device; a setup kernel writes the per-group problem
// shapes, pointers and strides into `workspace`; nothing is allocated and the host never
// waits. Verified on the H200 (session 4 run 3: op tests vs the scale-then-round emulation, the
// dummy-V3 model vs the mma.sync kernel); the runner uses it with CudaRunnerOptions::sm90_mixed_gemm
// (default on).
// Errors (unsupported shapes, CUTLASS or CUDA failures) throw ds::CheckError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/grouped_gemm.h"

namespace ds::cuda {

// True when this build has the kernel (CUTLASS headers found) and the current device is sm_90.
bool GroupedGemmSm90MixedAvailable();

// Empty when GroupedGemmSm90Mixed takes these params (p.w_fp8 must be set), else why not:
// build/device, K % 128 (whole scale blocks along K), N % 8, lda / ldo rows and pointers not
// 16-byte aligned, more than 2^31 rows/columns. The workspace is not checked here.
std::string GroupedGemmSm90MixedUnsupported(const GroupedGemmParams& p);

// Bytes of device workspace (256-byte aligned) GroupedGemmSm90Mixed needs for E groups of
// [N, K] weights on the current device (both output types). 0 without CUTLASS.
size_t GroupedGemmSm90MixedWorkspaceBytes(int64_t num_experts, int64_t N, int64_t K);

// Tokens per tile: 128, 256, or kAuto = 256 when max_rows >= 256 * num_experts, else 128.
enum class Sm90MixedTile { kAuto, k128, k256 };
bool GroupedGemmSm90MixedWideTile(const GroupedGemmParams& p, Sm90MixedTile tile);  // 256-token tile?

// Runs the GEMM on p.stream with p.workspace (>= GroupedGemmSm90MixedWorkspaceBytes bytes; the
// same size serves both tiles and output types). Ignores p.force_wmma / p.sm90 / p.sm90_mixed
// (callers dispatch through GroupedGemm, which uses kAuto).
void GroupedGemmSm90Mixed(const GroupedGemmParams& p, Sm90MixedTile tile = Sm90MixedTile::kAuto);

}  // namespace ds::cuda
