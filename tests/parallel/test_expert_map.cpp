// ExpertMap: construction, validation errors (naming layer/slot/expert), replica choice, JSON
// round trip and JSON errors; ExpertLoadRecorder bookkeeping.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "parallel/expert_load.h"
#include "parallel/expert_map.h"

namespace ds {
namespace {

bool Contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(ExpertMap, IdentityAndTrivial) {
  ExpertMap id = ExpertMap::Identity(3, 8);
  EXPECT_EQ(id.num_layers(), 3);
  EXPECT_EQ(id.num_logical(), 8);
  EXPECT_EQ(id.num_physical(), 8);
  EXPECT_TRUE(id.is_identity());
  for (int l = 0; l < 3; ++l)
    for (int e = 0; e < 8; ++e) {
      EXPECT_EQ(id.physical_to_logical(l, e), e);
      EXPECT_EQ(id.replicas(l, e), std::vector<int32_t>{e});
      for (int64_t t : {0, 1, 7, 1000}) EXPECT_EQ(id.ChooseReplica(l, e, t), e);
    }
  // 10 slots for 8 experts: slots 8, 9 replicate experts 0, 1.
  ExpertMap tr = ExpertMap::Trivial(2, 8, 10);
  EXPECT_FALSE(tr.is_identity());
  EXPECT_EQ(tr.num_physical(), 10);
  EXPECT_EQ(tr.replicas(1, 0), (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(tr.replicas(1, 1), (std::vector<int32_t>{1, 9}));
  EXPECT_EQ(tr.replica_count(1, 2), 1);
}

TEST(ExpertMap, ReplicaChoiceIsTokenModCount) {
  // layer 0: expert 0 on slots {0, 3, 5}, expert 1 on {1}, expert 2 on {2, 4}.
  auto m = ExpertMap::FromPhysicalToLogical({{0, 1, 2, 0, 2, 0}}, 3);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->replicas(0, 0), (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(m->replicas(0, 2), (std::vector<int32_t>{2, 4}));
  const int32_t want0[] = {0, 3, 5, 0, 3, 5, 0};
  for (int t = 0; t < 7; ++t) {
    EXPECT_EQ(m->ChooseReplica(0, 0, t), want0[t]) << t;
    EXPECT_EQ(m->ChooseReplica(0, 1, t), 1);
    EXPECT_EQ(m->ChooseReplica(0, 2, t), t % 2 == 0 ? 2 : 4);
  }
}

TEST(ExpertMap, ValidationErrorsNameLayerAndSlot) {
  auto missing = ExpertMap::FromPhysicalToLogical({{0, 1, 2, 3}, {0, 1, 1, 3}}, 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Contains(missing.status().message(), "layer 1: logical expert 2 has no physical slot"))
      << missing.status().message();

  auto range = ExpertMap::FromPhysicalToLogical({{0, 1, 2, 3, 0}, {0, 1, 2, 3, 4}}, 4);
  ASSERT_FALSE(range.ok());
  EXPECT_TRUE(Contains(range.status().message(), "layer 1 slot 4 holds logical expert 4")) << range.status().message();

  auto neg = ExpertMap::FromPhysicalToLogical({{0, 1, -1, 2, 3}}, 4);
  ASSERT_FALSE(neg.ok());
  EXPECT_TRUE(Contains(neg.status().message(), "layer 0 slot 2")) << neg.status().message();

  auto ragged = ExpertMap::FromPhysicalToLogical({{0, 1, 2, 3}, {0, 1, 2, 3, 3}}, 4);
  ASSERT_FALSE(ragged.ok());
  EXPECT_TRUE(Contains(ragged.status().message(), "layer 1 has 5 physical slots")) << ragged.status().message();

  auto few = ExpertMap::FromPhysicalToLogical({{0, 1, 2}}, 4);
  ASSERT_FALSE(few.ok());
  EXPECT_TRUE(Contains(few.status().message(), "fewer than the 4 logical experts")) << few.status().message();

  EXPECT_FALSE(ExpertMap::FromPhysicalToLogical({}, 4).ok());
  EXPECT_FALSE(ExpertMap::FromPhysicalToLogical({{0}}, 0).ok());
  for (const auto* m : {&missing, &range, &neg, &ragged, &few})
    EXPECT_EQ(m->status().code(), StatusCode::kInvalidArgument);
}

TEST(ExpertMap, CheckFits) {
  ExpertMap m = ExpertMap::Trivial(4, 16, 20);
  EXPECT_TRUE(m.CheckFits(4, 16).ok());
  EXPECT_TRUE(Contains(m.CheckFits(3, 16).message(), "4 layers, the model has 3"));
  EXPECT_TRUE(Contains(m.CheckFits(4, 8).message(), "16 logical experts, the model has 8"));
}

TEST(ExpertMap, JsonRoundTripAndFile) {
  auto m = ExpertMap::FromPhysicalToLogical({{3, 1, 0, 2, 3, 3}, {0, 1, 2, 3, 1, 0}}, 4);
  ASSERT_TRUE(m.ok());
  auto back = ExpertMap::FromJson(m->ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *m);
  EXPECT_EQ(back->replicas(0, 3), (std::vector<int32_t>{0, 4, 5}));

  const std::string path = ::testing::TempDir() + "/expert_map_test.json";
  ASSERT_TRUE(m->SaveFile(path).ok());
  auto loaded = ExpertMap::LoadFile(path, 4);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, *m);
  auto wrong = ExpertMap::LoadFile(path, 8);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(Contains(wrong.status().message(), "'num_logical_experts' is 4, expected 8")) << wrong.status().message();
  std::remove(path.c_str());
  EXPECT_EQ(ExpertMap::LoadFile(path).status().code(), StatusCode::kNotFound);
}

TEST(ExpertMap, JsonErrors) {
  // SGLang-style file with only the map: the expected count comes from the caller.
  auto sg = ExpertMap::FromJson(R"({"physical_to_logical_map": [[1, 0, 1]]})", 2);
  ASSERT_TRUE(sg.ok()) << sg.status().ToString();
  EXPECT_EQ(sg->replicas(0, 1), (std::vector<int32_t>{0, 2}));
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "top level must be an object"},
      {R"({"physical_to_logical_map": [[0, 1]]})", "'num_logical_experts' is missing"},
      {R"({"num_logical_experts": 2})", "missing 'physical_to_logical_map'"},
      {R"({"num_logical_experts": 2, "physical_to_logical_map": [[0, 1.5]]})", "layer 0 slot 1 is not an integer"},
      {R"({"num_logical_experts": 2, "physical_to_logical_map": [[0, 1], 3]})", "layer 1 is not an array"},
      {R"({"num_logical_experts": 2, "physical_to_logical_map": [[0, 0]]})", "logical expert 1 has no physical slot"},
      {R"({"num_logical_experts": 2, "num_physical_experts": 3, "physical_to_logical_map": [[0, 1]]})",
       "rows have 2 slots"},
  };
  for (const auto& c : cases) {
    auto r = ExpertMap::FromJson(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(r.status().message(), c.want)) << c.text << " -> " << r.status().message();
  }
}

TEST(ExpertLoadRecorder, CountsSnapshotReset) {
  ExpertLoadRecorder rec(3, 4, 6);
  const int32_t logical[] = {0, 3, 3, 1, 0};
  const int32_t physical[] = {0, 3, 5, 1, 4};
  rec.Record(1, logical, physical, 5);
  rec.EndForward();
  rec.Record(1, logical, physical, 2);
  rec.EndForward();
  ExpertLoadSnapshot s = rec.Snapshot();
  EXPECT_EQ(s.num_forwards, 2);
  EXPECT_EQ(s.logical[1], (std::vector<int64_t>{3, 1, 0, 3}));
  EXPECT_EQ(s.physical[1], (std::vector<int64_t>{2, 1, 0, 2, 1, 1}));
  EXPECT_EQ(s.logical[0], (std::vector<int64_t>(4, 0)));
  EXPECT_EQ(s.physical[2], (std::vector<int64_t>(6, 0)));
  EXPECT_TRUE(Contains(s.ToJson(), "\"logical_count\":[[0,0,0,0],[3,1,0,3],[0,0,0,0]]")) << s.ToJson();
  rec.Reset();
  ExpertLoadSnapshot z = rec.Snapshot();
  EXPECT_EQ(z.num_forwards, 0);
  EXPECT_EQ(z.logical[1], (std::vector<int64_t>(4, 0)));
  EXPECT_EQ(z.physical[1], (std::vector<int64_t>(6, 0)));
  // The snapshot taken before Reset is a copy.
  EXPECT_EQ(s.logical[1][0], 3);
}

}  // namespace
}  // namespace ds
