// `dsinfer inspect --model DIR [--output text|json]`: the architecture, parameter counts (total,
// activated per token, MTP separately), bytes by module and dtype, and the latent KV cache per
// token, computed from DIR/config.json alone (no weights are read).
// --check-weights also maps the checkpoint's safetensors files (headers only) and compares
// their tensors with the expected list: missing / unexpected / mis-shaped tensors (exit 1).
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/param_count.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"
#include "tools/command.h"

namespace {

using json = nlohmann::ordered_json;

std::string Billions(int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2fB", static_cast<double>(n) / 1e9);
  return buf;
}

std::string Gib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

std::string WithCommas(int64_t n) {
  std::string s = std::to_string(n), out;
  int k = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (k > 0 && k % 3 == 0 && *it != '-') out.push_back(',');
    out.push_back(*it);
    ++k;
  }
  return std::string(out.rbegin(), out.rend());
}

json ModuleParams(const std::array<int64_t, ds::kNumWeightModules>& a) {
  json j = json::object();
  for (int m = 0; m < ds::kNumWeightModules; ++m)
    if (a[m] != 0) j[ds::WeightModuleName(static_cast<ds::WeightModule>(m))] = a[m];
  return j;
}

json BytesTable(const ds::ByteTable& t) {
  json rows = json::array();
  for (const auto& [key, cell] : t)
    rows.push_back({{"module", ds::WeightModuleName(key.first)},
                    {"dtype", ds::DTypeName(key.second)},
                    {"bytes", cell.bytes},
                    {"tensors", cell.tensors}});
  return rows;
}

json BuildJson(const std::string& dir, const ds::ModelConfig& c, const ds::WeightStats& s) {
  json j;
  j["model"] = dir;
  j["config"] = json::parse(ds::ModelConfigToJson(c).dump());
  j["layers"] = {{"dense", s.num_dense_layers}, {"moe", s.num_moe_layers}, {"mtp", s.num_mtp_layers}};
  j["parameters"] = {
      {"total", s.total_params},
      {"activated_per_token", s.activated_params},
      {"activated_per_token_with_embedding", s.activated_params + s.embedding_params},
      {"embedding", s.embedding_params},
      {"by_module", ModuleParams(s.params_by_module)},
      {"note", "main model, MTP excluded; activated excludes the embedding lookup, includes lm_head; "
               "FP8 scale_inv tensors are not parameters"}};
  j["mtp"] = {{"layers", s.num_mtp_layers},
              {"params", s.mtp_params},
              {"unique_params", s.mtp_unique_params},
              {"activated_per_token", s.mtp_activated_params},
              {"by_module", ModuleParams(s.mtp_params_by_module)},
              {"bytes", s.mtp_bytes},
              {"tensors", s.mtp_num_tensors},
              {"shared_with_main", json::array({"embed_tokens.weight (= model.embed_tokens.weight)",
                                                "shared_head.head.weight (= lm_head.weight)"})}};
  j["bytes"] = {{"total", s.total_bytes},
                {"tensors", s.num_tensors},
                {"by_module_dtype", BytesTable(s.bytes_main)},
                {"with_mtp", s.total_bytes + s.mtp_bytes},
                {"mtp_by_module_dtype", BytesTable(s.bytes_mtp)},
                {"per_routed_expert", s.bytes_per_routed_expert}};
  j["kv_cache"] = {{"latent_dim", c.latent_dim()},
                   {"bytes_per_token_bf16", ds::LatentKvBytesPerToken(c, ds::DType::kBF16)},
                   {"bytes_per_token_fp32", ds::LatentKvBytesPerToken(c, ds::DType::kF32)},
                   {"bytes_per_token_bf16_with_mtp",
                    ds::LatentKvBytesPerToken(c, ds::DType::kBF16, /*include_mtp=*/true)}};
  return j;
}

json CheckJson(const ds::TensorCheck& r) {
  return {{"ok", r.ok()},           {"has_mtp", r.has_mtp},         {"expected", r.expected},
          {"missing", r.missing},   {"unexpected", r.unexpected},   {"bad_shape", r.bad_shape},
          {"other_dtype", r.other_dtype}};
}

void PrintList(const char* what, const std::vector<std::string>& v) {
  if (v.empty()) return;
  std::printf("  %s: %zu\n", what, v.size());
  for (size_t i = 0; i < v.size() && i < 20; ++i) std::printf("    %s\n", v[i].c_str());
  if (v.size() > 20) std::printf("    ... %zu more\n", v.size() - 20);
}

void PrintCheck(const ds::TensorCheck& r) {
  std::printf("\nweights check (safetensors headers vs expected tensors%s): %s, %zu expected\n",
              r.has_mtp ? ", MTP present" : ", no MTP weights", r.ok() ? "OK" : "MISMATCH", r.expected);
  PrintList("missing", r.missing);
  PrintList("unexpected", r.unexpected);
  PrintList("wrong shape", r.bad_shape);
  PrintList("other dtype (note)", r.other_dtype);
}

void PrintBytesTable(const ds::ByteTable& t, int64_t total) {
  std::printf("    %-16s %-8s %10s %22s %8s\n", "module", "dtype", "tensors", "bytes", "share");
  for (const auto& [key, cell] : t)
    std::printf("    %-16s %-8s %10lld %22s %7.2f%%\n", ds::WeightModuleName(key.first),
                ds::DTypeName(key.second), static_cast<long long>(cell.tensors),
                WithCommas(cell.bytes).c_str(), total ? 100.0 * cell.bytes / total : 0.0);
}

void PrintText(const std::string& dir, const ds::ModelConfig& c, const ds::WeightStats& s) {
  std::printf("model: %s (%s)\n\narchitecture\n", dir.c_str(), c.model_type.c_str());
  std::printf("  layers        %d (%d dense + %d MoE) + %d MTP; hidden %d; vocab %d\n",
              c.num_hidden_layers, s.num_dense_layers, s.num_moe_layers, s.num_mtp_layers,
              c.hidden_size, c.vocab_size);
  std::printf("  MLA           %d heads; q_lora_rank %d%s; kv_lora_rank %d; qk_nope %d + qk_rope %d; "
              "v_head %d; latent %d per token per layer\n",
              c.num_attention_heads, c.q_lora_rank, c.q_lora_rank == 0 ? " (q_proj directly)" : "",
              c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.latent_dim());
  if (c.n_routed_experts > 0)
    std::printf("  MoE           %d routed (top-%d; %d groups, top-%d groups; %s, %s%s; scale %g) + %d shared; "
                "expert inter %d; first_k_dense %d, freq %d\n",
                c.n_routed_experts, c.num_experts_per_tok, c.n_group, c.topk_group,
                ds::TopkMethodName(c.topk_method), ds::ScoringFuncName(c.scoring_func),
                c.norm_topk_prob ? ", norm_topk_prob" : "", c.routed_scaling_factor,
                c.n_shared_experts, c.moe_intermediate_size, c.first_k_dense_replace, c.moe_layer_freq);
  std::printf("  dense MLP     intermediate %d\n", c.intermediate_size);
  std::printf("  RoPE          %s, theta %g", c.rope.type.c_str(), c.rope.theta);
  if (c.rope.type == "yarn")
    std::printf(", factor %g, original_max_pos %d, mscale_all_dim %g", c.rope.factor,
                c.rope.original_max_position_embeddings, c.rope.mscale_all_dim);
  std::printf("; softmax scale %.6f; max_position %d\n", c.softmax_scale(), c.max_position_embeddings);
  if (c.quant.fp8)
    std::printf("  weights       FP8 e4m3, %dx%d blocks (fp32 scale_inv per block)\n",
                c.quant.weight_block_size[0], c.quant.weight_block_size[1]);
  else
    std::printf("  weights       %s\n", c.torch_dtype.c_str());

  std::printf("\nparameters (main model, MTP excluded)\n");
  std::printf("  total                 %s (%s)\n", Billions(s.total_params).c_str(),
              WithCommas(s.total_params).c_str());
  std::printf("  activated per token   %s (%s; embedding lookup excluded, lm_head included; "
              "with embedding %s)\n",
              Billions(s.activated_params).c_str(), WithCommas(s.activated_params).c_str(),
              Billions(s.activated_params + s.embedding_params).c_str());
  for (int m = 0; m < ds::kNumWeightModules; ++m)
    if (s.params_by_module[m] != 0)
      std::printf("    %-16s %18s\n", ds::WeightModuleName(static_cast<ds::WeightModule>(m)),
                  WithCommas(s.params_by_module[m]).c_str());
  if (s.num_mtp_layers > 0) {
    std::printf("\nMTP (%d layer%s, not included above)\n", s.num_mtp_layers, s.num_mtp_layers > 1 ? "s" : "");
    std::printf("  params                %s (%s), unique %s (its embed_tokens and shared_head.head are "
                "copies of the main embedding and lm_head)\n",
                Billions(s.mtp_params).c_str(), WithCommas(s.mtp_params).c_str(),
                Billions(s.mtp_unique_params).c_str());
    std::printf("  activated per token   %s\n", Billions(s.mtp_activated_params).c_str());
  }
  std::printf("\nbytes as stored (main model: %s, %s tensors)\n", Gib(s.total_bytes).c_str(),
              WithCommas(s.num_tensors).c_str());
  PrintBytesTable(s.bytes_main, s.total_bytes);
  if (s.num_mtp_layers > 0) {
    std::printf("  MTP: %s, %s tensors (checkpoint total %s = %s B)\n", Gib(s.mtp_bytes).c_str(),
                WithCommas(s.mtp_num_tensors).c_str(), Gib(s.total_bytes + s.mtp_bytes).c_str(),
                WithCommas(s.total_bytes + s.mtp_bytes).c_str());
    PrintBytesTable(s.bytes_mtp, s.mtp_bytes);
  }
  if (s.bytes_per_routed_expert > 0)
    std::printf("  one routed expert of one layer: %s B\n", WithCommas(s.bytes_per_routed_expert).c_str());
  std::printf("\nlatent KV cache per token: %s B bf16 (%d x 2 B x %d layers), %s B fp32",
              WithCommas(ds::LatentKvBytesPerToken(c, ds::DType::kBF16)).c_str(), c.latent_dim(),
              c.num_hidden_layers, WithCommas(ds::LatentKvBytesPerToken(c, ds::DType::kF32)).c_str());
  if (s.num_mtp_layers > 0)
    std::printf("; with MTP %s B bf16",
                WithCommas(ds::LatentKvBytesPerToken(c, ds::DType::kBF16, true)).c_str());
  std::printf("\n");
}

int RunInspect(int argc, char** argv) {
  CLI::App app{"Architecture, parameter counts and bytes of a checkpoint, from its config.json"};
  std::string dir, output = "text";
  app.add_option("--model", dir, "checkpoint directory (or its config.json)")->required();
  app.add_option("--output", output, "text | json")->check(CLI::IsMember({"text", "json"}));
  bool check_weights = false;
  app.add_flag("--check-weights", check_weights,
               "also compare the checkpoint's tensors (safetensors headers) with the expected list");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto cfg = ds::LoadModelConfig(dir);
  if (!cfg.ok()) {
    std::fprintf(stderr, "dsinfer inspect: %s\n", cfg.status().ToString().c_str());
    return 1;
  }
  const ds::WeightStats stats = ds::ComputeWeightStats(*cfg);
  std::optional<ds::TensorCheck> check;
  if (check_weights) {
    auto ckpt = ds::Checkpoint::Open(dir);
    if (!ckpt.ok()) {
      std::fprintf(stderr, "dsinfer inspect: %s\n", ckpt.status().ToString().c_str());
      return 1;
    }
    check = ds::CheckCheckpointTensors(*cfg, **ckpt);
  }
  if (output == "json") {
    json j = BuildJson(dir, *cfg, stats);
    if (check) j["weights_check"] = CheckJson(*check);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    PrintText(dir, *cfg, stats);
    if (check) PrintCheck(*check);
  }
  return check && !check->ok() ? 1 : 0;
}

}  // namespace

DS_REGISTER_COMMAND(inspect, "architecture, parameter counts and bytes from config.json (no weights)",
                    RunInspect);
