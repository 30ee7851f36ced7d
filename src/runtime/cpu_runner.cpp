#include "runtime/cpu_runner.h"

#include "common/check.h"
#include "common/logging.h"
#include "model/safetensors.h"

namespace ds {

StatusOr<std::unique_ptr<CpuModelRunner>> CpuModelRunner::Create(const std::string& model_dir,
                                                                 const CpuRunnerOptions& opts) {
  if (opts.num_kv_blocks <= 0) return InvalidArgument("CpuModelRunner: num_kv_blocks must be > 0");
  DS_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(model_dir));
  DS_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(model_dir));
  std::unique_ptr<CpuModelRunner> r(new CpuModelRunner());
  r->opts_ = opts;
  DS_ASSIGN_OR_RETURN(r->model_, DeepseekModel::Load(cfg, *ckpt));
  if (!opts.expert_map.empty()) DS_RETURN_IF_ERROR(r->model_->SetExpertMap(opts.expert_map));
  r->opts_.expert_map = ExpertMap();  // the model holds it
  r->ResetExpertLoad();
  // RoPE tables for every position the cache can hold.
  r->rope_ = BuildRopeTables(cfg, static_cast<int64_t>(opts.num_kv_blocks) * kBlockSize);
  const size_t per_layer = static_cast<size_t>(opts.num_kv_blocks) * kBlockSize * cfg.latent_dim();
  r->cache_.assign(cfg.num_hidden_layers, std::vector<float>(per_layer, 0.0f));
  for (auto& c : r->cache_) r->cache_ptrs_.push_back(c.data());
  DS_LOG(INFO) << "cpu runner: " << cfg.model_type << ", " << cfg.num_hidden_layers << " layers, "
               << opts.num_kv_blocks << " KV blocks (" << per_layer * 4 * cfg.num_hidden_layers / (1 << 20)
               << " MiB), MLA " << MlaModeName(opts.mla_mode);
  return r;
}

Status CpuModelRunner::Forward(const ForwardBatch& batch, ForwardOutput* out) {
  DS_RETURN_IF_ERROR(batch.Validate(opts_.num_kv_blocks));
  const int vocab = config().vocab_size;
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= vocab)
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                             std::to_string(vocab) + ")");
  model_->Forward(batch, cache_ptrs_, rope_, opts_.mla_mode, &out->logits, &expert_load_);
  expert_load_.EndForward();
  return Status::Ok();
}

Status CpuModelRunner::SetExpertMap(ExpertMap map) {
  DS_RETURN_IF_ERROR(model_->SetExpertMap(std::move(map)));
  ResetExpertLoad();
  return Status::Ok();
}

void CpuModelRunner::ResetExpertLoad() {
  const ExpertMap& m = model_->expert_map();
  expert_load_ = ExpertLoadRecorder(config().num_hidden_layers, m.num_logical(), m.num_physical());
}

}  // namespace ds
