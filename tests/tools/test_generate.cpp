// `dsinfer generate` end to end: greedy ids equal transformers' goldens; clear usage errors.
#include <gtest/gtest.h>

#include "run_cmd.h"

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

// Runs a shell command, returns (exit code, stdout).
std::pair<int, std::string> RunCmd(const std::string& cmd) { return ds::test::RunCmd(cmd, false); }

using json = nlohmann::json;


json Golden(const std::string& name) {
  std::ifstream f(std::string(DS_TEST_DATA_DIR) + "/" + name + "/golden.json");
  return json::parse(f);
}

std::string Ids(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

TEST(Generate, GreedyJsonMatchesGolden) {
  for (const char* name : {"v3_tiny", "v2_lite_tiny"}) {
    json g = Golden(name);
    const auto want = g["greedy_ids"].get<std::vector<int>>();
    for (const char* mla : {"auto", "naive", "absorbed"}) {
      auto [rc, out] = RunCmd(std::string(DS_BINARY) + " generate --model " + DS_TEST_DATA_DIR + "/" + name +
                           " --prompt-ids " + Ids(g["prompt_ids"].get<std::vector<int>>()) +
                           " --max-tokens 16 --temperature 0 --ignore-eos --output json --mla " + mla);
      ASSERT_EQ(rc, 0) << out;
      json j = json::parse(out);
      EXPECT_EQ(j["finish_reason"], "length");
      EXPECT_EQ(j["token_ids"].get<std::vector<int>>(), std::vector<int>(want.begin(), want.begin() + 16))
          << name << " mla=" << mla;
      EXPECT_TRUE(j.contains("text"));
      EXPECT_TRUE(j["timing"].contains("ttft_ms"));
    }
  }
}

// The CPU path goes through the engine's runner factory: --num-layers N (a truncated view of
// the checkpoint) and --load-format dummy (seeded random weights) work as in serve.
TEST(Generate, CpuNumLayersAndDummyWeights) {
  json g = Golden("v3_tiny");
  const std::string ids = Ids(g["prompt_ids"].get<std::vector<int>>());
  const std::string v3 = std::string(DS_BINARY) + " generate --model " + DS_TEST_DATA_DIR + "/v3_tiny --prompt-ids " +
                         ids + " --max-tokens 8 --ignore-eos --output json";
  // All 3 layers through the truncation path = the golden; 2 layers is another model.
  auto all = RunCmd(v3 + " --num-layers 3"), two = RunCmd(v3 + " --num-layers 2");
  ASSERT_EQ(all.first, 0);
  ASSERT_EQ(two.first, 0);
  const auto want = g["greedy_ids"].get<std::vector<int>>();
  EXPECT_EQ(json::parse(all.second)["token_ids"].get<std::vector<int>>(), std::vector<int>(want.begin(), want.begin() + 8));
  EXPECT_NE(json::parse(two.second)["token_ids"], json::parse(all.second)["token_ids"]);
  // Dummy weights from the config alone: deterministic in --seed.
  const std::string dummy = std::string(DS_BINARY) + " generate --model " + DS_TEST_DATA_DIR +
                            "/serve_tiny --load-format dummy --prompt-ids 1,2,3 --max-tokens 8 --ignore-eos --output json";
  auto a = RunCmd(dummy + " --seed 1"), b = RunCmd(dummy + " --seed 1"), c = RunCmd(dummy + " --seed 2");
  ASSERT_EQ(a.first, 0);
  EXPECT_EQ(json::parse(a.second)["token_ids"], json::parse(b.second)["token_ids"]);
  EXPECT_NE(json::parse(a.second)["token_ids"], json::parse(c.second)["token_ids"]);
}

TEST(Generate, SamplingIsSeededAndStopsAtEos) {
  json g = Golden("v3_tiny");
  const std::string base = std::string(DS_BINARY) + " generate --model " + DS_TEST_DATA_DIR +
                           "/v3_tiny --prompt-ids " + Ids(g["prompt_ids"].get<std::vector<int>>()) +
                           " --max-tokens 12 --temperature 1.0 --top-p 0.9 --top-k 50 --output json";
  auto a = RunCmd(base + " --seed 5"), b = RunCmd(base + " --seed 5");
  ASSERT_EQ(a.first, 0);
  EXPECT_EQ(json::parse(a.second)["token_ids"], json::parse(b.second)["token_ids"]);
  // finish_reason "stop" exactly when the EOS id (1) was generated.
  json j = json::parse(a.second);
  auto ids = j["token_ids"].get<std::vector<int>>();
  const bool hit = !ids.empty() && ids.back() == 1;
  EXPECT_EQ(j["finish_reason"], hit ? "stop" : "length");
}

TEST(Generate, UsageErrors) {
  const std::string base = std::string(DS_BINARY) + " generate --model " + DS_TEST_DATA_DIR + "/v3_tiny";
  EXPECT_EQ(RunCmd(base + " --prompt-ids 1,x").first, 2);
  EXPECT_EQ(RunCmd(base + " --prompt-ids 99999").first, 2);
  EXPECT_EQ(RunCmd(base).first, 2);
  EXPECT_NE(RunCmd(base + " --prompt-ids 3 --temperature -1").first, 0);
  EXPECT_EQ(RunCmd(std::string(DS_BINARY) + " generate --model /nonexistent --prompt-ids 3").first, 1);
#ifndef DS_WITH_CUDA
  EXPECT_EQ(RunCmd(base + " --prompt-ids 3 --device cuda").first, 1);
#endif
}

}  // namespace
