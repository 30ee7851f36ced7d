// Exact memory facts of DeepSeek-V3 (SYSTEM.md sec. 3, issue 8), from the real config.
#include <gtest/gtest.h>

#include <cmath>

#include "model/config.h"
#include "planner/model_size.h"

namespace ds::planner {
namespace {

ModelConfig V3() {
  auto c = LoadModelConfig(std::string(DS_SHARED_DIR) + "/models/deepseek-v3");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

TEST(PlannerModelSize, LatentCacheIs70272BytesPerTokenInBf16) {
  const ModelConfig c = V3();
  EXPECT_EQ(LatentCacheBytesPerToken(c, WType::kBF16, c.num_hidden_layers), 70272);
  // FP8 cache: 576 B + one fp32 scale per token per layer.
  EXPECT_EQ(LatentCacheBytesPerToken(c, WType::kFP8, 61), 580 * 61);
  // 72 concurrent x 4K context ~ 20 GB per card (SYSTEM.md sec. 3).
  EXPECT_NEAR(72.0 * 4096 * 70272 / 1e9, 20.7, 0.05);
}

TEST(PlannerModelSize, TotalAndActivatedParams) {
  const ModuleShapes m = CountModuleShapes(V3());
  EXPECT_EQ(m.n_layers, 61);
  EXPECT_EQ(m.n_moe_layers, 58);
  EXPECT_EQ(m.n_dense_layers, 3);
  // Hand count: attention 187,121,664 per layer (incl. norms), dense 3*7168*18432, 256 + 1
  // experts of 3*7168*2048, router 256*7168 + 256, embedding and head 129280*7168, final norm.
  EXPECT_EQ(m.attention.params(), 187121664);
  EXPECT_EQ(TotalParams(m), 671026419200);
  EXPECT_EQ(ActivatedParams(m), 37552297472);
  EXPECT_EQ(std::llround(TotalParams(m) / 1e9), 671);  // "671B"
  EXPECT_EQ(static_cast<int64_t>(ActivatedParams(m) / 1e9), 37);  // "37B"
  // Without the embedding table (a lookup, not a matmul): 36.6B, also "37B".
  EXPECT_EQ(std::llround((ActivatedParams(m) - m.embedding.params()) / 1e9), 37);
  // MTP: ~11.6B of its own (+ shared embedding/head = the "14B MTP module" with them).
  EXPECT_NEAR(MtpParams(m) / 1e9, 11.6, 0.1);
  EXPECT_NEAR((MtpParams(m) + m.embedding.params() + m.lm_head.params()) / 1e9, 13.5, 0.1);
}

TEST(PlannerModelSize, ExpertAndEmbeddingBytes) {
  const ModuleShapes m = CountModuleShapes(V3());
  // One routed expert over the 58 MoE layers in FP8: 3*7168*2048*58 B + fp32 128x128 block
  // scales (3 matrices x 16 x 56 blocks x 4 B per layer) = ~2.5 GB.
  EXPECT_EQ(m.routed_expert.bytes(WType::kFP8) * 58, 2554331136LL + 58LL * 3 * 16 * 56 * 4);
  EXPECT_NEAR(m.routed_expert.bytes(WType::kINT8) * 58 / 1e9, 2.55, 0.01);
  // Embedding and LM head 129280 x 7168 in bf16: 1.726 GiB each.
  EXPECT_EQ(m.embedding.bytes(WType::kBF16), 1853358080);
  EXPECT_EQ(m.lm_head.bytes(WType::kBF16), 1853358080);
  EXPECT_NEAR(m.embedding.bytes(WType::kBF16) / double(1 << 30), 1.726, 0.001);
  // Dense FFN ~1.1 GB (3 layers, 8-bit): 1.19e9 B = 1.107 GiB.
  EXPECT_NEAR(3 * m.dense_ffn.bytes(WType::kFP8) / double(1 << 30), 1.11, 0.01);
}

TEST(PlannerModelSize, V2LiteCounts) {
  auto c = LoadModelConfig(std::string(DS_SHARED_DIR) + "/models/deepseek-v2-lite");
  ASSERT_TRUE(c.ok());
  const ModuleShapes m = CountModuleShapes(*c);
  // DeepSeek-V2-Lite: 15.7B total, 2.4B activated (its model card).
  EXPECT_NEAR(TotalParams(m) / 1e9, 15.7, 0.1);
  EXPECT_NEAR(ActivatedParams(m) / 1e9, 2.7, 0.3);
  EXPECT_EQ(LatentCacheBytesPerToken(*c, WType::kBF16, 1), 576 * 2);
}

}  // namespace
}  // namespace ds::planner
