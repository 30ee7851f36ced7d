#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/dummy_checkpoint.h"
#include "runtime/runner_factory.h"

namespace ds {
namespace {

std::string ReadAll(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ForwardBatch OneSeq(const std::vector<int32_t>& toks) {
  ForwardBatch b;
  b.token_ids = toks;
  for (size_t i = 0; i < toks.size(); ++i) b.positions.push_back(static_cast<int32_t>(i));
  b.query_start = {0, static_cast<int32_t>(toks.size())};
  b.context_lens = {static_cast<int32_t>(toks.size())};
  b.max_blocks = 1;
  b.block_tables = {0};
  b.logits_indices = {static_cast<int32_t>(toks.size()) - 1};
  return b;
}

TEST(DummyCheckpoint, DeterministicInSeedAndLoadable) {
  const std::string cfg_path = std::string(DS_TEST_DATA_DIR) + "/v3_tiny/config.json";
  nlohmann::json cj = nlohmann::json::parse(ReadAll(cfg_path));
  auto d1 = MakeScratchDir("dsinfer_test_"), d2 = MakeScratchDir("dsinfer_test_"), d3 = MakeScratchDir("dsinfer_test_");
  ASSERT_TRUE(d1.ok() && d2.ok() && d3.ok());
  ASSERT_TRUE(WriteDummyCheckpoint(cj, 7, *d1).ok());
  ASSERT_TRUE(WriteDummyCheckpoint(cj, 7, *d2).ok());
  ASSERT_TRUE(WriteDummyCheckpoint(cj, 8, *d3).ok());
  const std::string a = ReadAll(*d1 + "/model.safetensors"), b = ReadAll(*d2 + "/model.safetensors"),
                    c = ReadAll(*d3 + "/model.safetensors");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  RunnerOptions o;
  o.model_dir = *d1;
  o.num_kv_blocks = 4;
  auto r = CreateModelRunner(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ForwardOutput out;
  ASSERT_TRUE((*r)->Forward(OneSeq({1, 2, 3}), &out).ok());
  EXPECT_EQ(out.logits.size(), static_cast<size_t>((*r)->config().vocab_size));
  for (const auto& d : {*d1, *d2, *d3}) std::filesystem::remove_all(d);
}

TEST(RunnerFactory, DummyAndTruncationAndErrors) {
  RunnerOptions o;
  o.model_dir = std::string(DS_TEST_DATA_DIR) + "/v3_tiny";
  o.load_format = "dummy";
  o.num_layers = 1;
  o.num_kv_blocks = 2;
  auto r = CreateModelRunner(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->config().num_hidden_layers, 1);
  // Truncating a real checkpoint keeps its weights for the kept layers: runs.
  o.load_format = "auto";
  auto t = CreateModelRunner(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ForwardOutput out;
  EXPECT_TRUE((*t)->Forward(OneSeq({5, 6}), &out).ok());
#ifndef DS_WITH_CUDA
  o.device = "cuda";
  auto c = CreateModelRunner(o);
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("without CUDA"), std::string::npos);
#endif
  o.device = "cpu";
  o.model_dir = "/nonexistent/dir";
  EXPECT_FALSE(CreateModelRunner(o).ok());
}

}  // namespace
}  // namespace ds
