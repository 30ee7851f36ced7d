#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace ds {
namespace {

using json = nlohmann::json;

TEST(Config, RealDeepSeekV3) {
  auto c = LoadModelConfig(std::string(DS_SHARED_DIR) + "/models/deepseek-v3");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "deepseek_v3");
  EXPECT_EQ(c->num_hidden_layers, 61);
  EXPECT_EQ(c->latent_dim(), 576);
  EXPECT_EQ(c->q_lora_rank, 1536);
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c->topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c->rope.type, "yarn");
  EXPECT_EQ(c->rope.original_max_position_embeddings, 4096);
  EXPECT_TRUE(c->quant.fp8);
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
  EXPECT_FALSE(c->is_moe_layer(2));
  EXPECT_TRUE(c->is_moe_layer(3));
  // mscale = 0.1 * 1.0 * ln(40) + 1
  double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c->softmax_scale(), m * m / std::sqrt(192.0), 1e-12);
}

TEST(Config, RealDeepSeekV2Lite) {
  auto c = LoadModelConfig(std::string(DS_SHARED_DIR) + "/models/deepseek-v2-lite");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->q_lora_rank, 0);
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSoftmax);
  EXPECT_EQ(c->topk_method, TopkMethod::kGreedy);
  EXPECT_EQ(c->n_shared_experts, 2);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->num_nextn_predict_layers, 0);
}

TEST(Config, Transformers5RopeParameters) {
  json j = {{"model_type", "deepseek_v3"},
            {"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 5000.0}, {"factor", 4.0},
                                 {"original_max_position_embeddings", 64}, {"mscale", 1.0},
                                 {"mscale_all_dim", 1.0}}}};
  auto c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.type, "yarn");
  EXPECT_EQ(c->rope.theta, 5000.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 64);
}

TEST(Config, ErrorsNameTheField) {
  auto expect_err = [](json j, const std::string& field) {
    auto c = ParseModelConfig(j);
    ASSERT_FALSE(c.ok()) << j.dump();
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().message();
  };
  expect_err({{"model_type", "llama"}}, "model_type");
  expect_err(json::object(), "model_type");
  expect_err({{"model_type", "deepseek_v3"}, {"scoring_func", "relu"}}, "scoring_func");
  expect_err({{"model_type", "deepseek_v3"}, {"topk_method", "best"}}, "topk_method");
  expect_err({{"model_type", "deepseek_v3"}, {"n_group", 7}}, "n_group");
  expect_err({{"model_type", "deepseek_v3"}, {"topk_group", 9}}, "topk_group");
  expect_err({{"model_type", "deepseek_v3"}, {"hidden_size", "big"}}, "hidden_size");
  expect_err({{"model_type", "deepseek_v3"}, {"hidden_size", -4}}, "hidden_size");
  expect_err({{"model_type", "deepseek_v2"}}, "num_experts_per_tok");
  expect_err({{"model_type", "deepseek_v3"}, {"quantization_config", {{"quant_method", "gptq"}}}},
             "quant_method");
  expect_err({{"model_type", "deepseek_v3"}, {"rope_scaling", {{"type", "ntk"}}}}, "rope_scaling");
}

}  // namespace
}  // namespace ds
