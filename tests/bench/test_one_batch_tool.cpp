// `dsinfer bench one-batch` / `bench roofline` end to end on the tiny fixtures (CPU).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>


namespace {

namespace fs = std::filesystem;

std::pair<int, std::string> RunBenchCmd(const std::string& args) {
  std::string cmd = "timeout 120 " + std::string(DS_BINARY) + " bench " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, k);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string Tmp(const std::string& n) {
  return (fs::temp_directory_path() / ("dsinfer_ob_" + std::to_string(getpid()) + "_" + n)).string();
}

TEST(BenchOneBatchTool, TinyCheckpointAndDummy) {
  std::string json = Tmp("one_batch.json");
  auto [rc, out] = RunBenchCmd("one-batch --model " + std::string(DS_TEST_DATA_DIR) +
                       "/v3_tiny --batch-size 3 --input-len 40 --output-len 6 --mem-bw-gbps 20 --flops-tflops 0.2"
                       " --output-file " + json);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("prefill:"), std::string::npos) << out;
  EXPECT_NE(out.find("decode: median step"), std::string::npos) << out;
  std::ifstream f(json);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["layers"], 3);
  EXPECT_EQ(j["batch_size"], 3);
  ASSERT_EQ(j["steps"].size(), 5u);  // O - 1 decode steps
  EXPECT_EQ(j["steps"][0]["context"], 41);
  EXPECT_EQ(j["steps"][4]["context"], 45);
  EXPECT_GT(j["prefill_ms"].get<double>(), 0);
  EXPECT_GT(j["step_ms"].get<double>(), 0);
  EXPECT_GT(j["roofline_step_ms"].get<double>(), 0);
  EXPECT_EQ(j["rates_source"], "given");
  // Roofline step time rises with context (more KV read).
  EXPECT_GT(j["steps"][4]["roofline_ms"].get<double>(), j["steps"][0]["roofline_ms"].get<double>());

  auto [rc2, out2] = RunBenchCmd("one-batch --model " + std::string(DS_TEST_DATA_DIR) +
                         "/v2_lite_tiny --load-format dummy --num-layers 2 --batch-size 2 --input-len 16"
                         " --output-len 3 --output-file " + json);
  ASSERT_EQ(rc2, 0) << out2;
  std::ifstream f2(json);
  auto j2 = nlohmann::json::parse(f2);
  EXPECT_EQ(j2["layers"], 2);
  EXPECT_EQ(j2["load_format"], "dummy");
  EXPECT_EQ(j2["rates_source"], "measured");
  EXPECT_GT(j2["mem_bw_gbps"].get<double>(), 0);

  auto [rc3, out3] = RunBenchCmd("one-batch --model /nonexistent --batch-size 1");
  EXPECT_EQ(rc3, 1) << out3;
  auto [rc4, out4] = RunBenchCmd("one-batch --model " + std::string(DS_TEST_DATA_DIR) + "/v3_tiny --device cuda");
  EXPECT_NE(rc4, 0) << out4;
}

TEST(BenchRooflineTool, PrintsAndWritesJson) {
  std::string json = Tmp("roofline.json");
  auto [rc, out] = RunBenchCmd("roofline --model " + std::string(DS_TEST_DATA_DIR) +
                       "/v3_tiny --batch-size 8 --input-len 1024 --output-len 256 --mem-bw-gbps 4800 --flops-tflops 989"
                       " --output-file " + json);
  ASSERT_EQ(rc, 0) << out;
  std::ifstream f(json);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["decode_context"], 1024 + 128);
  EXPECT_GT(j["roofline_step_ms"].get<double>(), 0);
  auto [rc2, out2] = RunBenchCmd("roofline --model " + std::string(DS_TEST_DATA_DIR) + "/v3_tiny --device cuda");
  EXPECT_EQ(rc2, 2) << out2;  // cuda rates must be given
}

}  // namespace
