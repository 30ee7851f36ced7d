// Parameter / byte accounting and the expected tensor list, checked against independent
// numbers:
//  - transformers' DeepseekV3ForCausalLM / DeepseekV2ForCausalLM built from the same configs on
//    the meta device: sum(p.numel()) (+ e_score_correction_bias buffers) = 671,026,419,200 (V3)
//    and 15,706,484,224 (V2-Lite); transformers does not build the MTP layer.
//  - the official deepseek-ai/DeepSeek-V3 checkpoint (a public listing of its 163 shards):
//    91,991 tensors, 688,574,839,360 bytes, 684,531,386,000 elements (scale_inv included).
//  - DeepSeek-V3 README_WEIGHTS.md: main model 671B total, 36.6B activated (incl. 0.9B head);
//    MTP 11.5B unique, 1.5B activated (both without eh_proj, 0.1B, by our reckoning).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/param_count.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"
#include "planner/model_size.h"
#include "safetensors_test_util.h"

namespace ds {
namespace {

using json = nlohmann::json;

const std::string kV3 = std::string(DS_SHARED_DIR) + "/models/deepseek-v3";
const std::string kV2Lite = std::string(DS_SHARED_DIR) + "/models/deepseek-v2-lite";

ModelConfig Load(const std::string& dir) {
  auto c = LoadModelConfig(dir);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// The V3 config with edits, for small variants.
ModelConfig V3With(const json& patch) {
  json j = ReadJson(kV3 + "/config.json");
  j.merge_patch(patch);
  auto c = ParseModelConfig(j);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

const TensorSpec* FindSpec(const std::vector<TensorSpec>& v, const std::string& name) {
  for (const auto& t : v)
    if (t.name == name) return &t;
  return nullptr;
}

void ExpectSpec(const std::vector<TensorSpec>& v, const std::string& name,
                std::vector<int64_t> shape, DType dtype) {
  const TensorSpec* t = FindSpec(v, name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->shape, shape) << name;
  EXPECT_EQ(t->dtype, dtype) << name << " is " << DTypeName(t->dtype);
}

double RelErr(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

TEST(ParamCount, DeepSeekV3Headline) {
  ModelConfig c = Load(kV3);
  WeightStats s = ComputeWeightStats(c);
  // Total, MTP excluded: 671B; exact value from transformers (meta device).
  EXPECT_EQ(s.total_params, 671'026'419'200);
  EXPECT_LT(RelErr(s.total_params, 671e9), 0.01);
  // Activated per token, MTP and embedding excluded, lm_head included: DeepSeek's 36.6B
  // (README_WEIGHTS.md), published rounded as "37B". Note: 36.63B is 1.01% below 37.0B.
  EXPECT_EQ(s.activated_params, 36'625'618'432);
  EXPECT_LT(RelErr(s.activated_params, 36.6e9), 0.001);
  EXPECT_EQ(std::llround(s.activated_params / 1e9), 37);
  // Per module, by hand from the config: attention per layer = q_a 7168*1536 + q_b 1536*24576 +
  // kv_a 7168*576 + kv_b 512*32768 + o 16384*7168 = 187,105,280.
  EXPECT_EQ(s.params_by_module[static_cast<int>(WeightModule::kAttention)], 61LL * 187'105'280);
  EXPECT_EQ(s.params_by_module[static_cast<int>(WeightModule::kRoutedExperts)],
            58LL * 256 * 3 * 7168 * 2048);
  EXPECT_EQ(s.params_by_module[static_cast<int>(WeightModule::kGate)], 58LL * 256 * (7168 + 1));
  EXPECT_EQ(s.embedding_params, 129280LL * 7168);
  EXPECT_EQ(s.num_dense_layers, 3);
  EXPECT_EQ(s.num_moe_layers, 58);
}

TEST(ParamCount, DeepSeekV3Mtp) {
  ModelConfig c = Load(kV3);
  WeightStats s = ComputeWeightStats(c);
  EXPECT_EQ(s.num_mtp_layers, 1);
  const int64_t emb = 129280LL * 7168, eh = 7168LL * 14336;
  EXPECT_EQ(s.mtp_params - s.mtp_unique_params, 2 * emb);  // embed_tokens + shared_head.head copies
  // README_WEIGHTS: 11.5B unique, 1.5B activated; those figures leave out eh_proj (0.1B).
  EXPECT_LT(RelErr(s.mtp_unique_params - eh, 11.5e9), 0.005);
  EXPECT_LT(RelErr(s.mtp_activated_params - eh, 1.5e9), 0.01);
  // The checkpoint on the Hub: 685B = main + MTP incl. its copies.
  EXPECT_EQ(std::llround((s.total_params + s.mtp_params) / 1e9), 684);  // 684.49B, "685B" rounded up
}

TEST(ParamCount, DeepSeekV3CheckpointBytesMatchOfficial) {
  ModelConfig c = Load(kV3);
  auto all = ExpectedTensors(c, /*include_mtp=*/true);
  EXPECT_EQ(all.size(), 91'991u);
  int64_t bytes = 0, elems = 0;
  for (const auto& t : all) {
    bytes += static_cast<int64_t>(t.nbytes());
    elems += t.numel();
  }
  EXPECT_EQ(bytes, 688'574'839'360);
  EXPECT_EQ(elems, 684'531'386'000);
  WeightStats s = ComputeWeightStats(c);
  EXPECT_EQ(s.total_bytes + s.mtp_bytes, bytes);
  EXPECT_EQ(s.num_tensors + s.mtp_num_tensors, 91'991);
  EXPECT_EQ(s.bytes_per_routed_expert, 3LL * (2048 * 7168 + 16 * 56 * 4));
  // Names are unique.
  std::set<std::string> names;
  for (const auto& t : all) names.insert(t.name);
  EXPECT_EQ(names.size(), all.size());
}

TEST(ParamCount, DeepSeekV3TensorShapesAndDtypes) {
  ModelConfig c = Load(kV3);
  auto all = ExpectedTensors(c, true);
  const DType bf = DType::kBF16, f8 = DType::kF8E4M3, f32 = DType::kF32;
  ExpectSpec(all, "model.embed_tokens.weight", {129280, 7168}, bf);
  ExpectSpec(all, "lm_head.weight", {129280, 7168}, bf);
  ExpectSpec(all, "model.norm.weight", {7168}, bf);
  ExpectSpec(all, "model.layers.0.self_attn.q_a_proj.weight", {1536, 7168}, f8);
  ExpectSpec(all, "model.layers.0.self_attn.q_a_proj.weight_scale_inv", {12, 56}, f32);
  ExpectSpec(all, "model.layers.0.self_attn.q_a_layernorm.weight", {1536}, bf);
  ExpectSpec(all, "model.layers.0.self_attn.q_b_proj.weight", {24576, 1536}, f8);
  ExpectSpec(all, "model.layers.0.self_attn.q_b_proj.weight_scale_inv", {192, 12}, f32);
  ExpectSpec(all, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {576, 7168}, f8);
  ExpectSpec(all, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv", {5, 56}, f32);
  ExpectSpec(all, "model.layers.0.self_attn.kv_a_layernorm.weight", {512}, bf);
  ExpectSpec(all, "model.layers.0.self_attn.kv_b_proj.weight", {32768, 512}, f8);
  ExpectSpec(all, "model.layers.0.self_attn.kv_b_proj.weight_scale_inv", {256, 4}, f32);
  ExpectSpec(all, "model.layers.0.self_attn.o_proj.weight", {7168, 16384}, f8);
  ExpectSpec(all, "model.layers.0.self_attn.o_proj.weight_scale_inv", {56, 128}, f32);
  ExpectSpec(all, "model.layers.2.mlp.down_proj.weight", {7168, 18432}, f8);
  ExpectSpec(all, "model.layers.2.mlp.down_proj.weight_scale_inv", {56, 144}, f32);
  EXPECT_EQ(FindSpec(all, "model.layers.3.mlp.down_proj.weight"), nullptr);
  ExpectSpec(all, "model.layers.3.mlp.gate.weight", {256, 7168}, bf);
  ExpectSpec(all, "model.layers.3.mlp.gate.e_score_correction_bias", {256}, f32);
  ExpectSpec(all, "model.layers.60.mlp.experts.255.down_proj.weight", {7168, 2048}, f8);
  ExpectSpec(all, "model.layers.60.mlp.experts.255.down_proj.weight_scale_inv", {56, 16}, f32);
  ExpectSpec(all, "model.layers.60.mlp.experts.0.gate_proj.weight_scale_inv", {16, 56}, f32);
  ExpectSpec(all, "model.layers.60.mlp.shared_experts.up_proj.weight", {2048, 7168}, f8);
  EXPECT_EQ(FindSpec(all, "model.layers.60.mlp.experts.256.up_proj.weight"), nullptr);
  // MTP layer 61.
  ExpectSpec(all, "model.layers.61.embed_tokens.weight", {129280, 7168}, bf);
  ExpectSpec(all, "model.layers.61.enorm.weight", {7168}, bf);
  ExpectSpec(all, "model.layers.61.hnorm.weight", {7168}, bf);
  ExpectSpec(all, "model.layers.61.eh_proj.weight", {7168, 14336}, bf);
  ExpectSpec(all, "model.layers.61.shared_head.norm.weight", {7168}, bf);
  ExpectSpec(all, "model.layers.61.shared_head.head.weight", {129280, 7168}, bf);
  ExpectSpec(all, "model.layers.61.self_attn.kv_b_proj.weight", {32768, 512}, f8);
  ExpectSpec(all, "model.layers.61.mlp.experts.7.up_proj.weight", {2048, 7168}, f8);
  EXPECT_TRUE(FindSpec(all, "model.layers.61.embed_tokens.weight")->mtp_shared);
  EXPECT_FALSE(FindSpec(all, "model.layers.61.enorm.weight")->mtp_shared);
  EXPECT_TRUE(FindSpec(all, "model.layers.61.mlp.gate.weight")->mtp);
  // Without MTP: no layer 61.
  auto main = ExpectedTensors(c, false);
  EXPECT_EQ(main.size(), 90'427u);
  EXPECT_EQ(FindSpec(main, "model.layers.61.enorm.weight"), nullptr);
  // A quantized weight is followed by its companion.
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].quantized) {
      ASSERT_LT(i + 1, all.size());
      EXPECT_EQ(all[i + 1].name, all[i].name + "_scale_inv");
      EXPECT_TRUE(all[i + 1].scale_inv);
    }
}

TEST(ParamCount, LayerTensorsAgreeWithFullList) {
  ModelConfig c = Load(kV3);
  auto all = ExpectedTensors(c, true);
  for (int layer : {0, 3, 60, 61}) {
    auto l = ExpectedLayerTensors(c, layer);
    size_t n = 0;
    for (const auto& t : all) n += t.layer == layer;
    EXPECT_EQ(l.size(), n) << layer;
    for (const auto& t : l) {
      const TensorSpec* f = FindSpec(all, t.name);
      ASSERT_NE(f, nullptr) << t.name;
      EXPECT_EQ(f->shape, t.shape);
      EXPECT_EQ(f->mtp, layer == 61);
    }
  }
}

TEST(ParamCount, LatentKvCache) {
  ModelConfig c = Load(kV3);
  EXPECT_EQ(LatentKvBytesPerToken(c), 70'272);
  EXPECT_EQ(LatentKvBytesPerToken(c, DType::kF32), 140'544);
  EXPECT_EQ(LatentKvBytesPerToken(c, DType::kBF16, true), 576 * 2 * 62);
}

TEST(ParamCount, DeepSeekV2Lite) {
  ModelConfig c = Load(kV2Lite);
  WeightStats s = ComputeWeightStats(c);
  EXPECT_EQ(s.total_params, 15'706'484'224);  // transformers, meta device
  EXPECT_LT(RelErr(s.total_params, 15.7e9), 0.01);
  // DeepSeek: "2.4B activated"; by the same convention as V3 we get 2.45B.
  EXPECT_LT(RelErr(s.activated_params, 2.4e9), 0.025);
  EXPECT_EQ(s.num_mtp_layers, 0);
  EXPECT_EQ(s.mtp_params, 0);
  auto all = ExpectedTensors(c, true);
  const DType bf = DType::kBF16;
  ExpectSpec(all, "model.layers.0.self_attn.q_proj.weight", {16 * 192, 2048}, bf);
  EXPECT_EQ(FindSpec(all, "model.layers.0.self_attn.q_a_proj.weight"), nullptr);
  ExpectSpec(all, "model.layers.0.mlp.gate_proj.weight", {10944, 2048}, bf);
  ExpectSpec(all, "model.layers.1.mlp.gate.weight", {64, 2048}, bf);
  EXPECT_EQ(FindSpec(all, "model.layers.1.mlp.gate.e_score_correction_bias"), nullptr);  // greedy
  ExpectSpec(all, "model.layers.1.mlp.shared_experts.down_proj.weight", {2048, 2 * 1408}, bf);
  ExpectSpec(all, "model.layers.26.mlp.experts.63.up_proj.weight", {1408, 2048}, bf);
  for (const auto& t : all) EXPECT_FALSE(t.quantized || t.scale_inv) << t.name;
  EXPECT_EQ(LatentKvBytesPerToken(c), 576 * 2 * 27);
}

TEST(ParamCount, VariantsTieBiasFp8Edges) {
  // Small FP8 model with dims that are not multiples of 128: scale grids ceil-divide.
  ModelConfig c = V3With({{"hidden_size", 200}, {"intermediate_size", 300}, {"moe_intermediate_size", 130},
                          {"num_hidden_layers", 3}, {"first_k_dense_replace", 1}, {"n_routed_experts", 8},
                          {"num_experts_per_tok", 2}, {"n_group", 2}, {"topk_group", 1},
                          {"num_attention_heads", 2}, {"num_key_value_heads", 2}, {"q_lora_rank", 96},
                          {"kv_lora_rank", 64}, {"qk_nope_head_dim", 32}, {"qk_rope_head_dim", 16},
                          {"v_head_dim", 32}, {"vocab_size", 1000}});
  auto all = ExpectedTensors(c, true);
  ExpectSpec(all, "model.layers.0.mlp.down_proj.weight", {200, 300}, DType::kF8E4M3);
  ExpectSpec(all, "model.layers.0.mlp.down_proj.weight_scale_inv", {2, 3}, DType::kF32);
  ExpectSpec(all, "model.layers.1.mlp.experts.7.gate_proj.weight_scale_inv", {2, 2}, DType::kF32);
  ExpectSpec(all, "model.layers.2.self_attn.kv_a_proj_with_mqa.weight_scale_inv", {1, 2}, DType::kF32);
  ExpectSpec(all, "model.layers.3.eh_proj.weight", {200, 400}, DType::kBF16);  // MTP layer 3
  WeightStats s = ComputeWeightStats(c);
  // Activated = total - embedding - (E - k) routed experts per MoE layer.
  const int64_t expert = 3LL * 130 * 200;
  EXPECT_EQ(s.activated_params, s.total_params - s.embedding_params - 2 * (8 - 2) * expert);

  // tie_word_embeddings: no lm_head tensor; attention_bias adds three biases per layer.
  ModelConfig t = V3With({{"tie_word_embeddings", true}, {"attention_bias", true}, {"num_hidden_layers", 4},
                          {"quantization_config", nullptr}, {"num_nextn_predict_layers", 0}});
  auto tl = ExpectedTensors(t, true);
  EXPECT_EQ(FindSpec(tl, "lm_head.weight"), nullptr);
  ExpectSpec(tl, "model.layers.0.self_attn.q_a_proj.bias", {1536}, DType::kBF16);
  ExpectSpec(tl, "model.layers.0.self_attn.kv_a_proj_with_mqa.bias", {576}, DType::kBF16);
  ExpectSpec(tl, "model.layers.3.self_attn.o_proj.bias", {7168}, DType::kBF16);
  ExpectSpec(tl, "model.layers.3.mlp.experts.0.up_proj.weight", {2048, 7168}, DType::kBF16);
  for (const auto& x : tl) EXPECT_FALSE(x.mtp) << x.name;

  // float32 checkpoints store plain tensors in F32.
  ModelConfig f = V3With({{"torch_dtype", "float32"}, {"quantization_config", nullptr}, {"num_hidden_layers", 1},
                          {"first_k_dense_replace", 1}});
  ExpectSpec(ExpectedTensors(f, false), "model.layers.0.mlp.up_proj.weight", {18432, 7168}, DType::kF32);
}

TEST(Inspect, CliJsonOnRealConfig) {
  std::string cmd = std::string(DS_BINARY) + " inspect --model " + kV3 + " --output json";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  ASSERT_EQ(rc, 0) << out;
  json j = json::parse(out);
  EXPECT_EQ(j["parameters"]["total"].get<int64_t>(), 671'026'419'200);
  EXPECT_EQ(j["parameters"]["activated_per_token"].get<int64_t>(), 36'625'618'432);
  EXPECT_EQ(j["mtp"]["layers"].get<int>(), 1);
  EXPECT_GT(j["mtp"]["params"].get<int64_t>(), 13'000'000'000);
  EXPECT_EQ(j["kv_cache"]["bytes_per_token_bf16"].get<int64_t>(), 70'272);
  EXPECT_EQ(j["bytes"]["with_mtp"].get<int64_t>(), 688'574'839'360);
  EXPECT_EQ(j["config"]["model_type"], "deepseek_v3");

  // Text output names the headline numbers; a bad directory is a clean error (exit 1).
  std::string text_cmd = std::string(DS_BINARY) + " inspect --model " + kV3;
  p = popen(text_cmd.c_str(), "r");
  out.clear();
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0);
  EXPECT_NE(out.find("671.03B"), std::string::npos) << out;
  EXPECT_NE(out.find("36.63B"), std::string::npos) << out;
  EXPECT_NE(out.find("70,272 B bf16"), std::string::npos) << out;
  int bad = std::system((std::string(DS_BINARY) + " inspect --model /nonexistent-dir 2>/dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(bad), 1);
}

// The planner's own module count (src/planner/model_size) agrees with this one. Conventions
// differ only in that the planner's "activated" includes the embedding table.
TEST(ParamCount, AgreesWithPlannerModelSize) {
  for (const std::string& dir : {kV3, kV2Lite}) {
    ModelConfig c = Load(dir);
    WeightStats s = ComputeWeightStats(c);
    planner::ModuleShapes m = planner::CountModuleShapes(c);
    EXPECT_EQ(planner::TotalParams(m), s.total_params) << dir;
    EXPECT_EQ(planner::ActivatedParams(m), s.activated_params + s.embedding_params) << dir;
    EXPECT_EQ(planner::MtpParams(m), s.mtp_unique_params) << dir;
    if (c.quant.fp8) {  // one routed expert of one layer, FP8 + block scales
      EXPECT_EQ(m.routed_expert.bytes(planner::WType::kFP8), s.bytes_per_routed_expert) << dir;
    }
  }
}

// The committed fixtures (written by transformers, converted to the official layout) hold
// exactly the tensors ExpectedTensors lists, with the same shapes and dtypes.
class FixtureTensors : public testing::TestWithParam<const char*> {};

TEST_P(FixtureTensors, MatchExpectedTensors) {
  const std::string dir = std::string(DS_TEST_DATA_DIR) + "/" + GetParam();
  ModelConfig c = Load(dir);
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  TensorCheck r = CheckCheckpointTensors(c, **ck);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.other_dtype.empty());
  EXPECT_EQ(r.expected, (*ck)->size());
  // Independently of CheckCheckpointTensors: MTP weights are optional in a checkpoint: include them only if the fixture has them.
  const bool has_mtp = c.num_nextn_predict_layers > 0 &&
                       (*ck)->Find("model.layers." + std::to_string(c.num_hidden_layers) +
                                   ".eh_proj.weight") != nullptr;
  auto expected = ExpectedTensors(c, has_mtp);
  std::set<std::string> want;
  for (const auto& t : expected) {
    want.insert(t.name);
    const TensorView* v = (*ck)->Find(t.name);
    if (v == nullptr) {
      ADD_FAILURE() << "fixture lacks " << t.name;
      continue;
    }
    EXPECT_EQ(v->shape, t.shape) << t.name;
    EXPECT_EQ(v->dtype, t.dtype) << t.name << ": fixture " << DTypeName(v->dtype) << ", expected "
                                 << DTypeName(t.dtype);
  }
  for (const auto& n : (*ck)->Names()) EXPECT_TRUE(want.count(n)) << "unexpected tensor " << n;
}

// CheckCheckpointTensors and `inspect --check-weights` name what is missing, extra or mis-shaped.
TEST(ParamCount, CheckWeightsReportsMismatches) {
  const std::string src = std::string(DS_TEST_DATA_DIR) + "/v2_glg_tiny";
  ModelConfig c = Load(src);
  auto expected = ExpectedTensors(c, false);
  std::vector<testutil::StTensor> ts;
  for (const auto& t : expected) {
    if (t.name == "model.norm.weight") continue;  // missing
    std::vector<int64_t> shape = t.shape;
    if (t.name == "model.layers.0.self_attn.kv_b_proj.weight") shape[0] += 1;  // mis-shaped
    ts.push_back(testutil::PatternTensor(t.name, t.dtype, shape));
  }
  ts.push_back(testutil::PatternTensor("model.layers.0.extra.weight", DType::kBF16, {2}));
  testutil::TempDir dir;
  testutil::WriteFile(dir.path() / "model.safetensors", testutil::Serialize(ts));
  std::filesystem::copy_file(src + "/config.json", dir.path() / "config.json");
  auto ck = Checkpoint::Open(dir.str());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  TensorCheck r = CheckCheckpointTensors(c, **ck);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.missing, std::vector<std::string>{"model.norm.weight"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"model.layers.0.extra.weight"});
  ASSERT_EQ(r.bad_shape.size(), 1u);
  EXPECT_NE(r.bad_shape[0].find("kv_b_proj.weight: expected ["), std::string::npos) << r.bad_shape[0];
  int rc = std::system((std::string(DS_BINARY) + " inspect --check-weights --model " + dir.str() +
                        " >/dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 1);
  rc = std::system((std::string(DS_BINARY) + " inspect --check-weights --model " + src + " >/dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTensors,
                         testing::Values("v3_tiny", "v3_fp8_tiny", "v2_lite_tiny", "v2_glg_tiny",
                                         "v3_yarn_long", "v3_rotate_half_tiny", "v3_mla512_tiny"));

}  // namespace
}  // namespace ds
