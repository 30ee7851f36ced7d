// `dsinfer eplb` end to end: DeepSeek's README example through the CLI, the recorder -> eplb ->
// runner loop on a fixture (logits unchanged under the new map), usage and input errors.
#include <gtest/gtest.h>

#include "run_cmd.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "parallel/expert_map.h"
#include "runtime/cpu_runner.h"

namespace ds {
namespace {

using ds::test::RunCmd;

using json = nlohmann::json;


std::string Tmp(const std::string& name) { return ::testing::TempDir() + "/eplb_tool_" + name; }

void Write(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

TEST(EplbTool, ReadmeExampleAndOutputMap) {
  const std::string load = Tmp("readme_load.json"), out = Tmp("readme_map.json");
  Write(load, R"({"logical_count": [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                                   [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]})");
  std::remove(out.c_str());
  auto [rc, text] = RunCmd(std::string(DS_BINARY) + " eplb --load " + load +
                           " --num-physical 16 --num-gpus 8 --num-nodes 2 --num-groups 4 --output " + out);
  ASSERT_EQ(rc, 0) << text;
  std::printf("%s", text.c_str());
  EXPECT_NE(text.find("policy hierarchical"), std::string::npos) << text;
  // Before: trivial placement (slot s -> s mod 12, experts 0..3 twice); GPU 2 holds experts 4
  // and 5: 104 + 165 = 269 = the max; mean 1033 / 8 = 129.125 -> balancedness 0.4800.
  const size_t row0 = text.find("\n0 ");
  ASSERT_NE(row0, std::string::npos) << text;
  const std::string line0 = text.substr(row0 + 1, text.find('\n', row0 + 1) - row0 - 1);
  EXPECT_NE(line0.find("0.4800"), std::string::npos) << line0;
  EXPECT_NE(line0.find("269.0"), std::string::npos) << line0;
  auto m = ExpertMap::LoadFile(out, 12);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::vector<std::vector<int32_t>> want = {{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
                                                  {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}};
  EXPECT_EQ(m->physical_to_logical_map(), want);
}

// Recorder snapshot -> dsinfer eplb -> runner with the new map: valid, logits unchanged.
TEST(EplbTool, RecordedLoadRebalancesAndRunsOnFixture) {
  const std::string dir = std::string(DS_TEST_DATA_DIR) + "/v3_tiny";
  CpuRunnerOptions o;
  o.num_kv_blocks = 4;
  auto r = CpuModelRunner::Create(dir, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ForwardBatch b;
  b.token_ids = {180, 464, 162, 468, 222, 44, 475, 46, 301, 396, 460, 362, 117, 312, 348, 117};
  b.max_blocks = 1;
  b.query_start = {0, 16};
  b.context_lens = {16};
  b.block_tables = {1};
  for (int32_t i = 0; i < 16; ++i) {
    b.positions.push_back(i);
    b.logits_indices.push_back(i);
  }
  ForwardOutput before;
  ASSERT_TRUE((*r)->Forward(b, &before).ok());
  const std::string load = Tmp("recorded_load.json"), out = Tmp("recorded_map.json");
  Write(load, (*r)->expert_load().Snapshot().ToJson());
  // v3_tiny: 16 experts, n_group 4; 24 slots on 4 GPUs of 2 nodes.
  auto [rc, text] = RunCmd(std::string(DS_BINARY) + " eplb --load " + load +
                           " --num-physical 24 --num-gpus 4 --num-nodes 2 --num-groups 4 --output " + out);
  ASSERT_EQ(rc, 0) << text;
  std::printf("%s", text.c_str());
  EXPECT_NE(text.find("idle"), std::string::npos) << "dense layer 0 has no load: " << text;
  auto m = ExpertMap::LoadFile(out, 16);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*r)->SetExpertMap(*m).ok());
  ForwardOutput after;
  // Fresh cache contents are overwritten by the same prefill, so the step is repeatable.
  ASSERT_TRUE((*r)->Forward(b, &after).ok());
  ASSERT_EQ(before.logits.size(), after.logits.size());
  EXPECT_EQ(0, std::memcmp(before.logits.data(), after.logits.data(), before.logits.size() * sizeof(float)));
  // The recorder now counts the new map's slots.
  EXPECT_EQ((*r)->expert_load().num_physical(), 24);
  EXPECT_EQ((*r)->expert_load().Snapshot().num_forwards, 1);
}

// The CLI loop: generate --dump-expert-load -> eplb -> generate --expert-map: same greedy ids.
TEST(EplbTool, GenerateDumpsLoadAndRunsWithTheNewMap) {
  const std::string model = std::string(DS_TEST_DATA_DIR) + "/v3_tiny";
  const std::string load = Tmp("gen_load.json"), map = Tmp("gen_map.json");
  const std::string gen = std::string(DS_BINARY) + " generate --model " + model +
                          " --prompt-ids 180,464,162,468,222,44,475,46 --max-tokens 6 --temperature 0 --ignore-eos"
                          " --output json";
  auto [rc1, out1] = RunCmd(gen + " --dump-expert-load " + load, false);
  ASSERT_EQ(rc1, 0) << out1;
  std::ifstream lf(load);
  const json snap = json::parse(lf);
  // 8 prompt tokens + 5 decode steps of one token, top-4 experts, 2 MoE layers of 3.
  EXPECT_EQ(snap["num_forwards"], 6);
  int64_t sum = 0;
  for (int64_t c : snap["logical_count"][1].get<std::vector<int64_t>>()) sum += c;
  EXPECT_EQ(sum, (8 + 5) * 4);
  auto [rc2, out2] = RunCmd(std::string(DS_BINARY) + " eplb --load " + load +
                            " --num-physical 20 --num-gpus 4 --num-groups 4 --output " + map);
  ASSERT_EQ(rc2, 0) << out2;
  auto [rc3, out3] = RunCmd(gen + " --expert-map " + map, false);
  ASSERT_EQ(rc3, 0) << out3;
  EXPECT_EQ(json::parse(out1)["token_ids"], json::parse(out3)["token_ids"]);
  // A map for another model is rejected with a clear error.
  Write(map, R"({"num_logical_experts": 8, "physical_to_logical_map": [[0,1,2,3,4,5,6,7]]})");
  auto [rc4, out4] = RunCmd(gen + " --expert-map " + map);
  EXPECT_EQ(rc4, 2);
  EXPECT_NE(out4.find("'num_logical_experts' is 8, expected 16"), std::string::npos) << out4;
}

TEST(EplbTool, Errors) {
  const std::string load = Tmp("small_load.json");
  Write(load, R"({"logical_count": [[1, 2, 3, 4], [4, 3, 2, 1]]})");
  const std::string bin = std::string(DS_BINARY) + " eplb ";
  struct Case {
    std::string args;
    int rc;
    const char* want;
  } cases[] = {
      {"--load " + load + " --num-physical 6 --num-gpus 4", 2, "num_physical (6) must be a multiple of num_gpus (4)"},
      {"--load " + load + " --num-physical 8 --num-gpus 4 --num-groups 3", 2, "num_groups (3) must divide"},
      {"--load " + load + " --num-physical 8 --num-gpus 4 --num-nodes 4 --num-groups 2 --policy hierarchical", 2,
       "multiple of num_nodes"},
      {"--load " + load + " --num-physical 8 --num-gpus 4 --policy best", 2, "best"},
      {"--load " + Tmp("does_not_exist.json") + " --num-physical 8 --num-gpus 4", 1, "cannot open"},
      {"--num-physical 8 --num-gpus 4", 2, "--load"},
  };
  for (const auto& c : cases) {
    auto [rc, text] = RunCmd(bin + c.args);
    EXPECT_EQ(rc, c.rc) << c.args << "\n" << text;
    EXPECT_NE(text.find(c.want), std::string::npos) << c.args << "\n" << text;
  }
  Write(load, R"({"logical_count": [[1, 2], [1]]})");
  auto [rc, text] = RunCmd(bin + "--load " + load + " --num-physical 4 --num-gpus 2");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(text.find("layer 1 has 1 experts, layer 0 has 2"), std::string::npos) << text;
}

}  // namespace
}  // namespace ds
