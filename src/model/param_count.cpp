#include "model/param_count.h"

namespace ds {

WeightStats ComputeWeightStats(const ModelConfig& c) {
  WeightStats s;
  s.num_mtp_layers = c.num_nextn_predict_layers;
  for (int l = 0; l < c.num_hidden_layers; ++l) (c.is_moe_layer(l) ? s.num_moe_layers : s.num_dense_layers)++;
  const int top_k = c.num_experts_per_tok;
  int first_moe = -1;
  for (int l = c.num_hidden_layers - 1; l >= 0; --l)
    if (c.is_moe_layer(l)) first_moe = l;
  for (const TensorSpec& t : ExpectedTensors(c, /*include_mtp=*/true)) {
    const int64_t n = t.numel();
    const int64_t b = static_cast<int64_t>(t.nbytes());
    ByteCell& cell = (t.mtp ? s.bytes_mtp : s.bytes_main)[{t.module, t.dtype}];
    cell.bytes += b;
    cell.tensors += 1;
    (t.mtp ? s.mtp_bytes : s.total_bytes) += b;
    (t.mtp ? s.mtp_num_tensors : s.num_tensors) += 1;
    if (t.module == WeightModule::kRoutedExperts && t.expert == 0 && t.layer == first_moe)
      s.bytes_per_routed_expert += b;
    if (t.scale_inv) continue;  // not a parameter
    // Activated per token: all but the embedding lookup and the routed experts beyond top-k.
    const bool activated = t.module != WeightModule::kEmbedding &&
                           (t.module != WeightModule::kRoutedExperts || t.expert < top_k);
    const auto m = static_cast<size_t>(t.module);
    if (t.mtp) {
      s.mtp_params += n;
      s.mtp_params_by_module[m] += n;
      if (!t.mtp_shared) s.mtp_unique_params += n;
      if (activated) s.mtp_activated_params += n;
    } else {
      s.total_params += n;
      s.params_by_module[m] += n;
      if (activated) s.activated_params += n;
      if (t.module == WeightModule::kEmbedding) s.embedding_params += n;
    }
  }
  return s;
}

int64_t LatentKvBytesPerToken(const ModelConfig& c, DType cache_dtype, bool include_mtp) {
  const int64_t layers = c.num_hidden_layers + (include_mtp ? c.num_nextn_predict_layers : 0);
  return static_cast<int64_t>(c.latent_dim()) * static_cast<int64_t>(DTypeSize(cache_dtype)) * layers;
}

}  // namespace ds
