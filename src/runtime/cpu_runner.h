// CpuModelRunner: the fp32 CPU backend behind the ModelRunner interface. Owns the model
// weights and the paged latent cache (per layer [num_kv_blocks, kBlockSize,
// kv_lora_rank + qk_rope_head_dim] fp32).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/mla.h"
#include "model/model.h"
#include "runtime/model_runner.h"

namespace ds {

struct CpuRunnerOptions {
  int num_kv_blocks = 64;           // cache pool size (64 tokens a block)
  MlaMode mla_mode = MlaMode::kAuto;
  // Logical->physical expert map of the MoE layers; empty: identity.
  ExpertMap expert_map;
};

class CpuModelRunner : public ModelRunner {
 public:
  // Reads DIR/config.json and the checkpoint in DIR, loads the weights to fp32.
  static StatusOr<std::unique_ptr<CpuModelRunner>> Create(const std::string& model_dir,
                                                          const CpuRunnerOptions& opts);

  const ModelConfig& config() const override { return model_->config(); }
  int num_kv_blocks() const override { return opts_.num_kv_blocks; }
  Status Forward(const ForwardBatch& batch, ForwardOutput* out) override;

  const DeepseekModel& model() const { return *model_; }
  MlaMode mla_mode() const { return opts_.mla_mode; }
  void set_mla_mode(MlaMode m) { opts_.mla_mode = m; }
  // Layer l's cache [num_kv_blocks, kBlockSize, latent_dim] (for tests and debugging).
  const float* layer_cache(int l) const { return cache_[l].data(); }

  // Replaces the expert map (must fit the model) and resets the expert load counts.
  Status SetExpertMap(ExpertMap map);
  // Per-layer expert token counts of every Forward since creation / the last Reset (the EPLB
  // input). Layers [num_hidden_layers]; dense layers stay zero.
  const ExpertLoadRecorder& expert_load() const { return expert_load_; }
  ExpertLoadRecorder& expert_load() { return expert_load_; }

 private:
  CpuModelRunner() = default;
  void ResetExpertLoad();  // sizes the recorder to the current map, all zero
  CpuRunnerOptions opts_;
  std::unique_ptr<DeepseekModel> model_;
  RopeTables rope_;
  std::vector<std::vector<float>> cache_;
  std::vector<float*> cache_ptrs_;
  ExpertLoadRecorder expert_load_;
};

}  // namespace ds
