// Parameter and byte accounting from the config alone (no weights read): totals, parameters
// activated per token, the MTP layer(s) separately, bytes by module and dtype, and the latent
// KV cache per token. Built on ExpectedTensors (tensor_specs.h), so it counts exactly the
// tensors of the official checkpoints. Used by `dsinfer inspect` and the planner.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <utility>

#include "common/dtype.h"
#include "model/config.h"
#include "model/tensor_specs.h"

namespace ds {

// Bytes and tensor count of one (module, dtype) cell.
struct ByteCell {
  int64_t bytes = 0;
  int64_t tensors = 0;
};
using ByteTable = std::map<std::pair<WeightModule, DType>, ByteCell>;

struct WeightStats {
  // Parameters = elements of weights; FP8 `_scale_inv` companions are quantization metadata,
  // not parameters (they are counted in bytes).
  //
  // Main model (everything except the MTP layers):
  int64_t total_params = 0;
  // Activated per token, DeepSeek's convention (README_WEIGHTS.md: V3 "36.6B, including 0.9B
  // for the output head"): every weight a token's forward pass multiplies with (attention,
  // dense MLPs, the gate, shared experts, num_experts_per_tok routed experts per MoE layer,
  // norms, lm_head); the embedding is a row lookup and is excluded.
  int64_t activated_params = 0;
  int64_t embedding_params = 0;  // add to activated_params for the "embedding counted" variant
  std::array<int64_t, kNumWeightModules> params_by_module{};
  // MTP layers (num_nextn_predict_layers), never included in the numbers above:
  int num_mtp_layers = 0;
  int64_t mtp_params = 0;            // all their tensors, incl. the stored embedding/head copies
  int64_t mtp_unique_params = 0;     // excluding those copies (shared with the main model)
  int64_t mtp_activated_params = 0;  // per token: layer with top-k experts + eh_proj + head
  std::array<int64_t, kNumWeightModules> mtp_params_by_module{};
  // Bytes as stored in the checkpoint (FP8 scales included).
  ByteTable bytes_main, bytes_mtp;
  int64_t total_bytes = 0, mtp_bytes = 0;
  int64_t num_tensors = 0, mtp_num_tensors = 0;
  // Bytes of one routed expert of one MoE layer (gate+up+down, with scales); 0 without MoE.
  int64_t bytes_per_routed_expert = 0;
  int num_moe_layers = 0, num_dense_layers = 0;  // main model
};

WeightStats ComputeWeightStats(const ModelConfig& c);

// Latent KV cache bytes per token: (kv_lora_rank + qk_rope_head_dim) * sizeof(cache dtype) per
// layer, over num_hidden_layers (+ the MTP layers if include_mtp). V3 bf16: 576 * 2 * 61 = 70,272 B.
int64_t LatentKvBytesPerToken(const ModelConfig& c, DType cache_dtype = DType::kBF16,
                              bool include_mtp = false);

}  // namespace ds
