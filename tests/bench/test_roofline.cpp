#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <filesystem>
#include <set>
#include <tuple>

#include "bench/roofline.h"
#include "model/config.h"

namespace ds::bench {
namespace {

ModelConfig Load(const char* name) {
  auto c = LoadModelConfig(std::string(DS_SHARED_DIR) + "/models/" + name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

// Parameter counts: with 1 byte per element and every expert touched, weight bytes are the
// parameter count; the published totals are 671B (V3 main model) and 15.7B (V2-Lite), and
// activated per token 37B and 2.4B.
TEST(BenchRoofline, WeightBytesMatchPublishedParameterCounts) {
  RooflineDtypes one{.linear_bytes = 1, .fp8_block_scales = false, .other_bytes = 1, .kv_bytes = 1};
  for (auto [name, total, active] : {std::tuple{"deepseek-v3", 671e9, 37e9}, std::tuple{"deepseek-v2-lite", 15.7e9, 2.4e9}}) {
    if (!std::filesystem::exists(std::string(DS_SHARED_DIR) + "/models/" + name)) GTEST_SKIP();
    ModelConfig c = Load(name);
    StepShape all = DecodeShape(1, 1);
    all.new_tokens = {1 << 20};  // every expert touched
    all.context_lens = {1 << 20};
    StepCost a = EstimateStep(c, all, one);
    // Embedding counted once as a table (the step reads T rows; replace by the table size).
    double params = a.weight_bytes() - a.embed_bytes + double(c.vocab_size) * c.hidden_size;
    EXPECT_NEAR(params / total, 1.0, 0.01) << name << " " << params;
    StepCost one_tok = EstimateStep(c, DecodeShape(1, 1), one);
    EXPECT_NEAR(one_tok.experts_touched_per_moe_layer, c.num_experts_per_tok, 1e-9);
    EXPECT_NEAR(one_tok.weight_bytes() / active, 1.0, 0.04) << name << " " << one_tok.weight_bytes();
  }
}

TEST(BenchRoofline, ExpectedDistinctExpertsFormulaAndSimulation) {
  EXPECT_DOUBLE_EQ(ExpectedDistinctExperts(256, 8, 1), 8.0);
  EXPECT_NEAR(ExpectedDistinctExperts(256, 8, 1e6), 256.0, 1e-9);
  EXPECT_EQ(ExpectedDistinctExperts(64, 6, 0), 0.0);
  EXPECT_NEAR(ExpectedDistinctExperts(64, 6, 2), 64 * (1 - std::pow(58.0 / 64, 2)), 1e-12);
  // Monte Carlo: T tokens, each k distinct experts uniformly at random.
  std::mt19937_64 rng(1);
  for (auto [E, k, T] : {std::tuple{256, 8, 16}, std::tuple{64, 6, 8}, std::tuple{256, 8, 64}}) {
    double sum = 0;
    const int trials = 2000;
    for (int t = 0; t < trials; ++t) {
      std::set<int> used;
      for (int tok = 0; tok < T; ++tok) {
        std::vector<int> perm(E);
        for (int e = 0; e < E; ++e) perm[e] = e;
        for (int j = 0; j < k; ++j) {
          std::swap(perm[j], perm[j + rng() % (E - j)]);
          used.insert(perm[j]);
        }
      }
      sum += used.size();
    }
    EXPECT_NEAR(sum / trials, ExpectedDistinctExperts(E, k, T), 0.01 * E) << E << " " << k << " " << T;
  }
}

// A small hand-checkable config: no MoE, no q_lora, one layer.
ModelConfig Tiny() {
  ModelConfig c;
  c.model_type = "deepseek_v2";
  c.vocab_size = 1000;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.q_lora_rank = 0;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  return c;
}

TEST(BenchRoofline, HandComputedDecodeAndPrefill) {
  ModelConfig c = Tiny();
  RooflineDtypes dt{.linear_bytes = 2, .fp8_block_scales = false, .other_bytes = 2, .kv_bytes = 2};
  // Decode: 3 sequences at context 10 (after the step).
  StepCost d = EstimateStep(c, DecodeShape(3, 10), dt);
  // Attention weights: q 2*24*64 + kv_a 40*64 + kv_norm 32 + kv_b 2*32*32 + o 64*32 + 2 norms 64.
  double attn_elems = 48 * 64 + 40 * 64 + 32 + 64 * 32 + 64 * 32 + 2 * 64;
  EXPECT_DOUBLE_EQ(d.attn_weight_bytes, 2 * attn_elems);
  EXPECT_DOUBLE_EQ(d.dense_weight_bytes, 2 * 3 * 64 * 128);
  EXPECT_DOUBLE_EQ(d.moe_weight_bytes, 0);
  EXPECT_DOUBLE_EQ(d.embed_bytes, 2 * 3 * 64);
  EXPECT_DOUBLE_EQ(d.lm_head_bytes, 2 * (1000 * 64 + 64));
  EXPECT_DOUBLE_EQ(d.kv_read_bytes, 2 * 3 * 10 * 40);   // absorbed: whole context in place
  EXPECT_DOUBLE_EQ(d.kv_write_bytes, 2 * 3 * 1 * 40);
  // FLOPs: projections per token 2*(48*64 + 64*40 + 32*64) + absorbed kv_b 2*32*64, x3 tokens.
  EXPECT_DOUBLE_EQ(d.attn_proj_flops, 3 * (2.0 * (48 * 64 + 64 * 40 + 32 * 64) + 2.0 * 32 * 64));
  // Core: 2*H*(2*kvl+rope) per visible position, 10 positions, 3 tokens.
  EXPECT_DOUBLE_EQ(d.attn_core_flops, 3 * 2.0 * 2 * (64 + 8) * 10);
  EXPECT_DOUBLE_EQ(d.mlp_flops, 3 * 2.0 * 3 * 64 * 128);
  EXPECT_DOUBLE_EQ(d.lm_head_flops, 3 * 2.0 * 64 * 1000);

  // Prefill: 2 sequences of 4 tokens. Naive core: positions 1+2+3+4 = 10 per sequence.
  StepCost p = EstimateStep(c, PrefillShape(2, 4), dt);
  EXPECT_DOUBLE_EQ(p.attn_core_flops, 2 * 2.0 * 2 * (24 + 16) * 10);
  EXPECT_DOUBLE_EQ(p.kv_read_bytes, 0);  // nothing cached before
  EXPECT_DOUBLE_EQ(p.kv_write_bytes, 2 * 8 * 40);
  EXPECT_DOUBLE_EQ(p.attn_proj_flops, 8 * 2.0 * (48 * 64 + 64 * 40 + 32 * 64) + 8 * 2.0 * 32 * 64);
  EXPECT_DOUBLE_EQ(p.lm_head_flops, 2 * 2.0 * 64 * 1000);

  // Roofline time: max of the two.
  RooflineTime t = RooflineTimeOf(d, Hardware{1.0, 1e-3});  // 1 GB/s, 1 GFLOP/s
  EXPECT_NEAR(t.memory_ms, d.total_bytes() / 1e9 * 1e3, 1e-12);
  EXPECT_NEAR(t.compute_ms, d.total_flops() / 1e9 * 1e3, 1e-12);
  EXPECT_EQ(t.ms(), std::max(t.memory_ms, t.compute_ms));
}

TEST(BenchRoofline, Fp8ScalesAndMoeTouchedExperts) {
  ModelConfig c = Tiny();
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.n_shared_experts = 1;
  c.moe_intermediate_size = 256;
  c.first_k_dense_replace = 0;
  RooflineDtypes dt{.linear_bytes = 1, .fp8_block_scales = true, .other_bytes = 2, .kv_bytes = 2};
  StepCost d1 = EstimateStep(c, DecodeShape(1, 5), dt);
  // One token touches exactly k = 2 experts; each expert: 3 linears of 256x64 fp8 (+1 scale
  // block of 128x128 each ... ceil(256/128)*ceil(64/128) = 2 blocks per [256,64]).
  double expert = 3 * (256 * 64 * 1 + 2 * 4);
  double router = 8 * 64 * 2 + 8 * 4;
  EXPECT_DOUBLE_EQ(d1.moe_weight_bytes, router + expert /*shared*/ + 2 * expert);
  StepCost d4 = EstimateStep(c, DecodeShape(4, 5), dt);
  EXPECT_DOUBLE_EQ(d4.moe_weight_bytes, router + expert + ExpectedDistinctExperts(8, 2, 4) * expert);
  EXPECT_GT(d4.moe_weight_bytes, d1.moe_weight_bytes);
  // MoE FLOPs per token: router + shared + k experts.
  EXPECT_DOUBLE_EQ(d4.mlp_flops, 4 * 2.0 * (64 * 8 + 3 * 64 * 256 + 3 * 64 * 256 * 2));
}

}  // namespace
}  // namespace ds::bench

namespace ds::bench {
namespace {
TEST(BenchRoofline, CudaDtypesKeepKvbBf16AndRouterFp32) {
  ModelConfig c;
  auto cfg = LoadModelConfig(std::string(DS_SHARED_DIR) + "/models/deepseek-v3");
  if (!cfg.ok()) GTEST_SKIP();
  c = *cfg;
  RooflineDtypes cuda = DtypesFor(c, true);
  EXPECT_EQ(cuda.linear_bytes, 1);
  EXPECT_TRUE(cuda.fp8_block_scales);
  RooflineDtypes plain = cuda;
  plain.kv_b_proj_bytes = 0;
  plain.router_bytes = 0;
  StepCost a = EstimateStep(c, DecodeShape(1, 100), cuda), b = EstimateStep(c, DecodeShape(1, 100), plain);
  // kv_b_proj [128 * 256, 512] per layer: bf16 instead of fp8 + scales; router [256, 7168] fp32 vs bf16.
  double kvb = 128.0 * 256 * 512;
  double kvb_fp8 = kvb + (128.0 * 256 / 128) * (512 / 128) * 4;
  EXPECT_NEAR(a.attn_weight_bytes - b.attn_weight_bytes, 61 * (2 * kvb - kvb_fp8), 1);
  EXPECT_NEAR(a.moe_weight_bytes - b.moe_weight_bytes, 58 * 256.0 * 7168 * 2, 1);
  RooflineDtypes cpu = DtypesFor(c, false);
  EXPECT_EQ(cpu.linear_bytes, 4);
  EXPECT_EQ(cpu.kv_bytes, 4);
}
}  // namespace
}  // namespace ds::bench

namespace ds::bench {
namespace {
TEST(BenchRoofline, PartsCoverTheStep) {
  auto cfg = LoadModelConfig(std::string(DS_SHARED_DIR) + "/models/deepseek-v3");
  if (!cfg.ok()) GTEST_SKIP();
  ModelConfig c = *cfg;
  c.num_hidden_layers = 6;  // 3 dense + 3 MoE
  Hardware hw{4800, 989};
  for (StepShape shape : {DecodeShape(64, 2048), PrefillShape(4, 1024)}) {
    StepCost s = EstimateStep(c, shape, DtypesFor(c, true));
    RooflineParts p = RooflinePartsOf(s, hw);
    RooflineTime whole = RooflineTimeOf(s, hw);
    // Memory and compute terms each add up exactly over the parts.
    EXPECT_NEAR(p.attention.memory_ms + p.moe.memory_ms + p.dense.memory_ms + p.other.memory_ms, whole.memory_ms, 1e-9);
    EXPECT_NEAR(p.attention.compute_ms + p.moe.compute_ms + p.dense.compute_ms + p.other.compute_ms, whole.compute_ms,
                1e-9);
    EXPECT_GE(p.attention.ms() + p.moe.ms() + p.dense.ms() + p.other.ms(), whole.ms() - 1e-9);
    EXPECT_GT(p.moe.ms(), 0);
    EXPECT_GT(p.dense.ms(), 0);
  }
}
}  // namespace
}  // namespace ds::bench
