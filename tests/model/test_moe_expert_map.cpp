// The CPU MoE layer routes through the logical->physical expert map: outputs and logits are
// bit-identical for any valid map (replicas share the logical expert's weights), and the
// ExpertLoadRecorder counts equal the routing decisions.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/rng.h"
#include "model/moe.h"
#include "parallel/expert_load.h"
#include "parallel/expert_map.h"
#include "runtime/cpu_runner.h"

namespace ds {
namespace {

std::string FixtureDir(const std::string& name) { return std::string(DS_TEST_DATA_DIR) + "/" + name; }

float Rand(uint64_t seed, uint64_t i, float scale) {
  return static_cast<float>((SampleUniform(seed, i) * 2.0 - 1.0) * scale);
}

void Fill(std::vector<float>* v, size_t n, uint64_t seed, float scale) {
  v->resize(n);
  for (size_t i = 0; i < n; ++i) (*v)[i] = Rand(seed, i, scale);
}

// A non-identity map with redundant replicas: per layer, the logical experts in a rotated,
// strided order, then E/2 extra slots replicating experts chosen per layer (some twice).
ExpertMap ReplicatedMap(int layers, int E) {
  std::vector<std::vector<int32_t>> p2l(layers);
  for (int l = 0; l < layers; ++l) {
    for (int s = 0; s < E; ++s) p2l[l].push_back((s * 5 + l + 3) % E);  // 5 is coprime with 4, 8, 16
    for (int i = 0; i < E / 2; ++i) p2l[l].push_back((l * 3 + (i / 2) * 7) % E);
  }
  auto m = ExpertMap::FromPhysicalToLogical(std::move(p2l), E);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->is_identity());
  return std::move(m).value();
}

// MoeForward on random weights: identity vs a replicated map, outputs bit-identical; recorder
// counts equal the routing decisions (MoeRoute) and the token-mod-replicas dispatch rule.
TEST(MoeExpertMap, LayerOutputBitIdenticalAndCountsMatchRouting) {
  for (const char* fixture : {"v3_tiny", "v2_lite_tiny", "v2_glg_tiny"}) {
    auto cfg_or = LoadModelConfig(FixtureDir(fixture));
    ASSERT_TRUE(cfg_or.ok()) << cfg_or.status().ToString();
    const ModelConfig cfg = *cfg_or;
    const int E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;
    const int64_t H = cfg.hidden_size, I = cfg.moe_intermediate_size, n = 53;
    MoeWeights w;
    Fill(&w.gate, E * H, 1, 0.5f);
    if (cfg.topk_method == TopkMethod::kNoauxTc) Fill(&w.bias, E, 2, 0.1f);
    w.experts.resize(E);
    for (int e = 0; e < E; ++e) {
      w.experts[e].hidden = H;
      w.experts[e].inter = I;
      Fill(&w.experts[e].gate_up, 2 * I * H, 100 + e, 0.2f);
      Fill(&w.experts[e].down, H * I, 200 + e, 0.2f);
    }
    w.has_shared = true;
    w.shared.hidden = H;
    w.shared.inter = I;
    Fill(&w.shared.gate_up, 2 * I * H, 3, 0.2f);
    Fill(&w.shared.down, H * I, 4, 0.2f);
    std::vector<float> x;
    Fill(&x, n * H, 5, 1.0f);

    const int layer = 1;
    std::vector<float> out_id(n * H), out_map(n * H, 123.0f);
    MoeForward(cfg, w, x.data(), n, out_id.data());
    const ExpertMap map = ReplicatedMap(3, E);
    ExpertLoadRecorder rec(3, E, map.num_physical());
    MoeForward(cfg, w, x.data(), n, out_map.data(), {&map, layer, &rec});
    EXPECT_EQ(0, std::memcmp(out_id.data(), out_map.data(), out_id.size() * sizeof(float)))
        << fixture << ": MoE output differs under a replicated expert map";

    // Expected counts from the router and the dispatch rule, computed here independently.
    std::vector<int32_t> ids(n * K);
    std::vector<float> wts(n * K);
    MoeRoute(cfg, w, x.data(), n, ids.data(), wts.data());
    std::vector<int64_t> want_logical(E, 0), want_physical(map.num_physical(), 0);
    for (int64_t t = 0; t < n; ++t)
      for (int k = 0; k < K; ++k) {
        const int e = ids[t * K + k];
        const auto& reps = map.replicas(layer, e);
        ++want_logical[e];
        ++want_physical[reps[t % reps.size()]];
      }
    const ExpertLoadSnapshot s = rec.Snapshot();
    EXPECT_EQ(s.logical[layer], want_logical) << fixture;
    EXPECT_EQ(s.physical[layer], want_physical) << fixture;
    EXPECT_EQ(s.logical[0], std::vector<int64_t>(E, 0));
    // Replicated experts really split their tokens: some expert with >= 2 replicas and >= 2
    // tokens has tokens on more than one slot.
    bool split = false;
    for (int e = 0; e < E; ++e) {
      const auto& reps = map.replicas(layer, e);
      int used = 0;
      for (int32_t sl : reps) used += s.physical[layer][sl] > 0;
      split |= used >= 2;
    }
    EXPECT_TRUE(split) << fixture;
  }
}

std::unique_ptr<CpuModelRunner> MakeRunner(const std::string& name, ExpertMap map = {}) {
  CpuRunnerOptions o;
  o.num_kv_blocks = 4;
  o.expert_map = std::move(map);
  auto r = CpuModelRunner::Create(FixtureDir(name), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

// One prefill of `tokens` in block 0..; returns all logits.
std::vector<float> Prefill(CpuModelRunner& r, const std::vector<int32_t>& tokens) {
  ForwardBatch b;
  b.max_blocks = 1;
  b.query_start = {0, static_cast<int32_t>(tokens.size())};
  b.token_ids = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.positions.push_back(static_cast<int32_t>(i));
    b.logits_indices.push_back(static_cast<int32_t>(i));
  }
  b.context_lens = {static_cast<int32_t>(tokens.size())};
  b.block_tables = {2};
  ForwardOutput out;
  Status st = r.Forward(b, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out.logits;
}

// Whole model: logits with a non-identity replicated map equal the identity-map logits exactly;
// the recorder's per-layer counts are consistent with the routing.
TEST(MoeExpertMap, RunnerLogitsBitIdenticalAndLoadRecorded) {
  const std::vector<int32_t> prompt = {180, 464, 162, 468, 222, 44, 475, 46, 301, 396, 460, 362,
                                       117, 312, 348, 117, 476, 251, 104, 161, 449, 298, 430, 343};
  for (const char* fixture : {"v3_tiny", "v2_lite_tiny", "v3_fp8_tiny"}) {
    auto base = MakeRunner(fixture);
    ASSERT_NE(base, nullptr);
    const ModelConfig& cfg = base->config();
    const int L = cfg.num_hidden_layers, E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;
    EXPECT_TRUE(base->model().expert_map().is_identity());
    const ExpertMap map = ReplicatedMap(L, E);
    auto mapped = MakeRunner(fixture, map);
    ASSERT_NE(mapped, nullptr);
    EXPECT_EQ(mapped->model().expert_map(), map);

    const auto want = Prefill(*base, prompt);
    const auto got = Prefill(*mapped, prompt);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << fixture << ": logits differ under a replicated expert map";

    const ExpertLoadSnapshot sb = base->expert_load().Snapshot(), sm = mapped->expert_load().Snapshot();
    EXPECT_EQ(sb.num_forwards, 1);
    EXPECT_EQ(sm.num_forwards, 1);
    ASSERT_EQ(static_cast<int>(sm.logical.size()), L);
    for (int l = 0; l < L; ++l) {
      int64_t sum = 0;
      for (int64_t c : sm.logical[l]) sum += c;
      EXPECT_EQ(sum, cfg.is_moe_layer(l) ? static_cast<int64_t>(prompt.size()) * K : 0) << fixture << " layer " << l;
      // Routing is unchanged by the map; the identity map's slots are its logical experts.
      EXPECT_EQ(sm.logical[l], sb.logical[l]) << fixture << " layer " << l;
      EXPECT_EQ(sb.physical[l], sb.logical[l]) << fixture << " layer " << l;
      // Physical counts folded through the map give the logical counts.
      std::vector<int64_t> folded(E, 0);
      for (int s = 0; s < map.num_physical(); ++s) folded[map.physical_to_logical(l, s)] += sm.physical[l][s];
      EXPECT_EQ(folded, sm.logical[l]) << fixture << " layer " << l;
    }
    // Counts accumulate over forwards until reset.
    Prefill(*mapped, std::vector<int32_t>(prompt.begin(), prompt.begin() + 5));
    EXPECT_EQ(mapped->expert_load().Snapshot().num_forwards, 2);
    mapped->expert_load().Reset();
    EXPECT_EQ(mapped->expert_load().Snapshot().logical[L - 1], std::vector<int64_t>(E, 0));
  }
}

TEST(MoeExpertMap, RunnerRejectsMapsThatDoNotFit) {
  auto r = MakeRunner("v3_tiny");
  ASSERT_NE(r, nullptr);
  Status st = r->SetExpertMap(ExpertMap::Identity(2, 16));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("2 layers, the model has 3"), std::string::npos) << st.message();
  st = r->SetExpertMap(ExpertMap::Identity(3, 8));
  EXPECT_NE(st.message().find("8 logical experts, the model has 16"), std::string::npos) << st.message();
  // A fitting map is accepted and resizes the recorder to its slots.
  ASSERT_TRUE(r->SetExpertMap(ExpertMap::Trivial(3, 16, 24)).ok());
  EXPECT_EQ(r->expert_load().num_physical(), 24);
  CpuRunnerOptions o;
  o.expert_map = ExpertMap::Identity(3, 4);
  auto bad = CpuModelRunner::Create(FixtureDir("v3_tiny"), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("4 logical experts"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace ds
