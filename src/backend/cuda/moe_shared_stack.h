// Stacks a MoE layer's shared experts after its routed experts, as extra expert groups of the
// grouped / skinny GEMM layout (the runner's fused_moe_shared; docs/design/decode_small_batch.md,
// "Launch fusions"): shared expert s of S becomes group E + s of
//   w13 [E + S, 2I, H] = [its gate rows [s I, (s + 1) I) ; its up rows [S I + s I, S I + (s + 1) I)]
//   w2  [E + S, H, I]  = its columns [s I, (s + 1) I) of the shared down_proj [H, S I]
// from the shared MLP's fused gate_up [2 S I, H] (all gate rows, then all up rows) and down
// [H, S I]; bf16 (2-byte) or FP8 e4m3 (1-byte) elements, and for FP8 the 128x128 block scales
// sliced the same way (needs I % 128 == 0). Device-to-device copies on `stream` (asynchronous).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

struct SharedExpertStackParams {
  int64_t E, S, I, H;                             // routed experts, shared experts, moe_intermediate, hidden
  bool fp8 = false;
  const void* gate_up; const float* gate_up_scales = nullptr;  // [2 S I, H]; fp8: [2 S I / 128, ceil(H / 128)]
  const void* down; const float* down_scales = nullptr;        // [H, S I]; fp8: [ceil(H / 128), S I / 128]
  void* w13; float* w13_scales = nullptr;         // [E + S, 2I, H]; fp8: [E + S, 2I / 128, ceil(H / 128)]
  void* w2; float* w2_scales = nullptr;           // [E + S, H, I]; fp8: [E + S, ceil(H / 128), I / 128]
  cudaStream_t stream = nullptr;
};
// Errors: DS_CHECK (FP8 without I % 128 == 0 or without scales).
void StackSharedExperts(const SharedExpertStackParams& p);

}  // namespace ds::cuda
