// ModelConfig: the architecture of a DeepSeek-V2/V3-family checkpoint, parsed from a Hugging
// Face config.json (model_type deepseek_v2, deepseek_v3, kimi_k2).
//
// Both spellings in use are accepted: the official checkpoints' top-level `rope_theta` +
// `rope_scaling` (YaRN), and transformers 5's `rope_parameters`. Absent keys take the same
// defaults as transformers' DeepseekV2Config / DeepseekV3Config for that model_type.
// An unknown or inconsistent value is an INVALID_ARGUMENT Status naming the field.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace ds {

enum class ScoringFunc { kSoftmax, kSigmoid };
// greedy: top-k over all experts; group_limited_greedy: V2 groups ranked by their max score;
// noaux_tc: V3 groups ranked by the sum of their top-2 biased scores, bias for selection only.
enum class TopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };

const char* ScoringFuncName(ScoringFunc s);
const char* TopkMethodName(TopkMethod m);

// RoPE scaling. type "default" (plain RoPE) or "yarn" (DeepSeek-V2/V3).
struct RopeConfig {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;
  int original_max_position_embeddings = 0;  // 0 when type == "default"
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent (transformers then uses get_mscale(factor))
  double mscale_all_dim = 0.0;  // 0 = absent
  bool truncate = true;         // transformers' yarn `truncate` (round correction range)
};

// quantization_config {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128,128]}.
struct QuantConfig {
  bool fp8 = false;
  std::array<int, 2> weight_block_size = {128, 128};
  std::string activation_scheme = "dynamic";
};

struct ModelConfig {
  std::string model_type;  // "deepseek_v2" | "deepseek_v3" | "kimi_k2"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;      // dense FFN
  int moe_intermediate_size = 0;  // per routed / shared expert
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  // MLA
  int q_lora_rank = 0;  // 0: q_proj directly (V2-Lite); else q_a_proj -> norm -> q_b_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool rope_interleave = true;  // official checkpoints store rope dims interleaved
  RopeConfig rope;
  int max_position_embeddings = 0;
  // MoE
  int n_routed_experts = 0;  // 0: no MoE layers
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  TopkMethod topk_method = TopkMethod::kGreedy;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  // MTP
  int num_nextn_predict_layers = 0;
  // misc
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::string hidden_act = "silu";
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  std::string torch_dtype = "bfloat16";
  QuantConfig quant;

  // Derived quantities.
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Latent cache width per token per layer: kv_lora_rank + qk_rope_head_dim (576 for V3).
  int latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  bool is_moe_layer(int layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // YaRN attention scale multiplier: 0.1 * mscale_all_dim * ln(factor) + 1 when yarn with
  // mscale_all_dim, else 1. The softmax scale is qk_head_dim^-0.5 * m^2 (DeepSeek-V2 paper,
  // reference modeling_deepseek.py).
  double yarn_mscale_all_dim() const;
  double softmax_scale() const;
};

// Parses a config.json object. Errors name the field.
StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j);
// Reads DIR/config.json (or the file itself when `path` is a file).
StatusOr<ModelConfig> LoadModelConfig(const std::string& path);
// Serialises the parsed config (canonical field names) for `inspect` and debugging.
nlohmann::json ModelConfigToJson(const ModelConfig& c);

}  // namespace ds
