// Loading checkpoint tensors into fp32 host memory for the CPU backend.
//
// BF16, F16 and F32 convert exactly. F8_E4M3 weights are dequantised with their
// `<name>_scale_inv` companion (F32, one scale per 128x128 block, ceil-divided at the edges:
// shape [ceil(out/128), ceil(in/128)]): w[i][j] = fp8(q[i][j]) * scale_inv[i/128][j/128]
// (DeepSeek-V3 inference/kernel.py weight_dequant).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace ds {

// Loads `name` as fp32, checking that its shape equals `expected_shape` (error names the
// tensor, the expected and the actual shape). If the tensor is FP8, `name` + "_scale_inv"
// must exist with the block-grid shape; `block` is the config's weight_block_size.
StatusOr<std::vector<float>> LoadTensorF32(const Checkpoint& ckpt, const std::string& name,
                                           const std::vector<int64_t>& expected_shape,
                                           std::array<int, 2> block = {128, 128});

}  // namespace ds
