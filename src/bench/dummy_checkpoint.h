// A random-weight checkpoint written from a config (for `bench one-batch --load-format dummy`
// on a runner that only loads checkpoints). Tensor names and shapes follow the Hugging Face
// DeepSeek-V2/V3 layout that model/*.cpp loads; weights are BF16, uniform with std `init_std`
// (transformers' initializer_range 0.02), norms 1, e_score_correction_bias 0 (fp32).
// The written config.json drops quantization_config (weights are BF16).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ds::bench {

// Writes DIR/config.json and DIR/model.safetensors for `config_json` (a config.json object)
// with num_hidden_layers = num_layers when num_layers > 0. DIR must exist.
Status WriteDummyCheckpoint(const nlohmann::json& config_json, int num_layers, const std::string& dir,
                            uint64_t seed, double init_std = 0.02);

}  // namespace ds::bench
