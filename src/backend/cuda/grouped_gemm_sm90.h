// Hopper (sm_90a) grouped expert GEMM for MoE at prefill sizes: wgmma tensor cores, TMA loads
// and stores, warp-specialised persistent CTAs, built from the CUTLASS 3.x/4.x library API
// (CUTLASS's "ptr-array grouped" kernels; headers from scripts/get_cutlass.sh, compiled only
// when CMake finds them, DS_HAVE_CUTLASS). Same contract as GroupedGemm (grouped_gemm.h): for
// each expert e and each permuted row r in [offsets[e], offsets[e+1]):
//   out[r, :] = a[r, :] @ w[e]^T,  w[e]: [N, K] row-major (torch Linear layout),
// with fp32 accumulation. Two input kinds:
//   - kBf16: bf16 activations x bf16 weights;
//   - kFp8: e4m3 activations with DeepSeek-V3's 1x128 per-token-group scales x e4m3 weights with
//     128x128 block scales (DeepSeek-V3 tech report 3.3.2): out = sum_k (aq * as) (wq * ws),
//     partial products over each 128-wide K block promoted to fp32 with both scales
//     (CUTLASS's blockwise-scaling mainloop). Activation scales as Fp8QuantizePerTokenGroup
//     writes them with ScaleLayout::kTokenMajor: a_scales[r * ceil(K/128) + k / 128]; weight
//     scales in the checkpoint layout w_scales[(e * N/128 + n / 128) * K/128 + k / 128].
// Output fp32 or bf16, row-major with leading dimension ldo. Rows of a group are exactly
// [offsets[e], offsets[e+1]) (no padding needed; padded rows, e.g. moe_permute's zero rows,
// are computed like any other); rows outside every group and columns >= N are never written.
// Groups may be empty.
//
// Graph-safe: the offsets stay on the device. A setup kernel writes the per-group problem
// shapes, pointers and strides (and, for kFp8, the scales re-laid out per group as CUTLASS's
// M-major / N-major scale layout wants) into `workspace`; nothing is allocated and the host
// never waits. The caller reserves GroupedGemmSm90WorkspaceBytes() bytes up front.
//
// Tiles: kBf16 128x256x64, kFp8 128x128x128; both "cooperative" (two consumer warpgroups
// share one output tile), cluster 1x1, persistent over all groups' tiles.
// Errors (unsupported shapes, CUTLASS or CUDA failures) throw ds::CheckError.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/gemm.h"

namespace ds::cuda {

enum class Sm90GemmInput { kBf16, kFp8 };

struct GroupedGemmSm90Params {
  Sm90GemmInput input = Sm90GemmInput::kBf16;
  const void* a; int64_t lda;          // [rows, K] bf16 or e4m3
  const float* a_scales = nullptr;     // kFp8: [rows, ceil(K/128)] (token-major)
  const int32_t* offsets;              // [E + 1] device, non-decreasing, offsets[0] = 0
  int64_t max_rows;                    // rows allocated (>= offsets[E]; sizes the scale workspace)
  const void* w;                       // [E, N, K] bf16 or e4m3
  const float* w_scales = nullptr;     // kFp8: [E, N/128, K/128]
  int64_t num_experts, N, K;
  void* out; DTypeOut out_type = DTypeOut::kF32; int64_t ldo;  // [rows, N]
  void* workspace = nullptr; size_t workspace_bytes = 0;        // device, 256-byte aligned
  cudaStream_t stream = nullptr;
};

// True when this build has the kernels (CUTLASS headers found) and the current device is sm_90.
bool GroupedGemmSm90Available();

// Empty when GroupedGemmSm90 takes these params, else why not (alignment, shape: N, K, E > 0,
// 0 <= max_rows, every dimension < 2^31, lda >= K, ldo >= N, offsets given; device, build).
// The workspace is not checked here.
std::string GroupedGemmSm90Unsupported(const GroupedGemmSm90Params& p);

// Bytes of device workspace GroupedGemmSm90 needs for these sizes on the current device.
// Errors: CheckError unless E in [1, 2^31), max_rows >= 0, N > 0, K > 0.
size_t GroupedGemmSm90WorkspaceBytes(Sm90GemmInput input, int64_t num_experts, int64_t max_rows, int64_t N,
                                     int64_t K);

void GroupedGemmSm90(const GroupedGemmSm90Params& p);

}  // namespace ds::cuda
