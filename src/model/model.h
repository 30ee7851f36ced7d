// DeepSeek-V2/V3 decoder (fp32 CPU reference): embedding -> N x [RMSNorm -> MLA -> residual ->
// RMSNorm -> dense SwiGLU MLP or DeepSeekMoE -> residual] -> final RMSNorm -> LM head.
// Source: transformers DeepseekV3ForCausalLM / DeepseekV2ForCausalLM.
//
// Weights are loaded once to fp32 (BF16/F16 converted, FP8 e4m3 block-dequantised with
// weight_scale_inv). MTP (num_nextn_predict_layers) weights are not loaded: MTP is off, with a
// warning naming whether the checkpoint has them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/mla.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "model/safetensors.h"
#include "runtime/model_runner.h"

namespace ds {

struct DecoderLayerWeights {
  std::vector<float> input_norm;  // [hidden]
  std::vector<float> post_norm;   // [hidden]
  MlaWeights attn;
  bool is_moe = false;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
};

class DeepseekModel {
 public:
  // Loads every tensor of the main model from `ckpt`. Errors name the missing/mis-shaped tensor.
  static StatusOr<std::unique_ptr<DeepseekModel>> Load(const ModelConfig& cfg, const Checkpoint& ckpt);

  const ModelConfig& config() const { return cfg_; }
  bool mtp_available() const { return mtp_available_; }

  // The logical->physical expert map every MoE layer routes through (parallel/expert_map.h):
  // [num_hidden_layers] rows over n_routed_experts logical experts; identity after Load (empty
  // for a model without routed experts). SetExpertMap rejects a map that does not fit.
  const ExpertMap& expert_map() const { return expert_map_; }
  Status SetExpertMap(ExpertMap map);

  // One step over `batch` (already validated). caches[l]: layer l's latent cache
  // [num_blocks, kBlockSize, kv_lora + rope]. rope: tables covering every position. Returns
  // logits [batch.logits_indices.size(), vocab] in *logits. `expert_load` (optional) counts
  // every MoE layer's routing decisions (logical experts and the physical slots serving them).
  void Forward(const ForwardBatch& batch, const std::vector<float*>& caches, const RopeTables& rope,
               MlaMode mode, std::vector<float>* logits, ExpertLoadRecorder* expert_load = nullptr) const;

 private:
  explicit DeepseekModel(const ModelConfig& cfg) : cfg_(cfg) {}
  ModelConfig cfg_;
  std::vector<float> embed_;    // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers_;
  std::vector<float> norm_;     // [hidden]
  std::vector<float> lm_head_;  // [vocab, hidden]
  bool mtp_available_ = false;
  ExpertMap expert_map_;
};

}  // namespace ds
