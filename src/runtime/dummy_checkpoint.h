// Dummy checkpoints: `--load-format dummy` builds a model from its config alone with seeded
// random bf16 weights, written as a Hugging Face-layout safetensors file (the names and
// shapes DeepseekModel loads) into a scratch directory that the runner then loads like any
// checkpoint. Also used to truncate a model to its first N layers (`--num-layers`).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ds {

// Writes out_dir/config.json (= config_json without quantization_config and MTP layers) and
// out_dir/model.safetensors with every tensor the config implies: uniform(-s, s) with
// s = 1/sqrt(fan_in) for projections, 1 for norms, 0 for the noaux_tc correction bias.
// Deterministic in `seed`.
Status WriteDummyCheckpoint(const nlohmann::json& config_json, uint64_t seed, const std::string& out_dir);

// A fresh scratch directory under $TMPDIR (or /tmp); removed by the caller.
StatusOr<std::string> MakeScratchDir(const std::string& prefix);

}  // namespace ds
