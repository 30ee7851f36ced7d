// Dense SwiGLU MLP (DeepSeek-V2/V3 dense layers, shared experts and each routed expert):
// out = down(silu(gate(x)) * up(x)). Source: transformers DeepseekV3MLP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace ds {

struct MlpWeights {
  int64_t hidden = 0, inter = 0;
  std::vector<float> gate_up;  // [2 * inter, hidden]: gate_proj rows then up_proj rows
  std::vector<float> down;     // [hidden, inter]
};

// Loads <prefix>.{gate_proj,up_proj,down_proj}.weight (bf16/f32/fp8 dequantised).
Status LoadMlp(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& prefix,
               int64_t inter, MlpWeights* w);

// out[n, hidden] (+)= scale_i * MLP(x[i]) for each row; `row_scale` may be nullptr (1).
// x: [n, hidden] fp32. accumulate: add into out instead of overwriting.
void MlpForward(const MlpWeights& w, const float* x, int64_t n, float* out, bool accumulate,
                const float* row_scale = nullptr);

}  // namespace ds
