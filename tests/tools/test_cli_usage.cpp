// Usage errors of the dsinfer subcommands: exit code 2 and a message a user can read (no
// CLI11 "not in range 0.000000 to 1797693..." walls of digits), and setup errors that say
// which flag fixes them.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace {

// Runs `dsinfer ARGS` with stderr merged; returns (exit code, output).
std::pair<int, std::string> Dsinfer(const std::string& args) {
  std::string out;
  FILE* f = popen((std::string(DS_BINARY) + " " + args + " 2>&1").c_str(), "r");
  if (!f) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(CliUsage, NegativeAndZeroNumbersAreUsageErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"serve --max-model-len -5", "--max-model-len: must be >= 0, got -5"},
      {"serve --num-kv-blocks -3", "--num-kv-blocks: must be >= 0, got -3"},
      {"serve --max-running-requests 0", "--max-running-requests: must be > 0, got 0"},
      {"serve --max-body-bytes 0", "--max-body-bytes: must be > 0, got 0"},
      {"serve --shutdown-timeout -1", "--shutdown-timeout: must be >= 0, got -1"},
      {"serve --mem-fraction-static 0", "--mem-fraction-static must be in (0, 1], got 0"},
      {"generate --model x --num-layers -1", "--num-layers: must be >= 0, got -1"},
      {"serve --reasoning-parser qwen3", "--reasoning-parser: qwen3 not in {deepseek-r1,deepseek_r1}"},
      {"bench roofline --model x --input-len -5", "--input-len: Value -5 not in range 1 to"},
      {"bench one-batch --model x --num-layers -3", "--num-layers: must be >= 0, got -3"},
      // vLLM's tensor-parallel flag: told what to use instead (not "arguments were not expected")
      {"serve --tensor-parallel-size 2", "use --dp-size N to serve on N GPUs"},
      {"serve --tp 4", "tensor parallelism 4 is not supported by serve"},
  };
  for (const auto& [args, want] : cases) {
    auto [rc, out] = Dsinfer(args);
    EXPECT_EQ(rc, 2) << args << "\n" << out;
    EXPECT_NE(out.find(want), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(out.find("0.000000"), std::string::npos) << args << "\n" << out;
  }
}

TEST(CliUsage, ServeWithoutTokenizerNamesTheFlag) {
  auto [rc, out] = Dsinfer("serve --model " + std::string(DS_TEST_DATA_DIR) +
                           "/serve_fake --load-format fake --port 0");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--tokenizer byte"), std::string::npos) << out;
}

TEST(CliUsage, DetokenizeRejectsIdsOutsideTheVocabulary) {
  // The real DeepSeek-V3 tokenizer (128,815 ids); Decode would silently drop these ids.
  const std::string tok = std::string(DS_SHARED_DIR) + "/models/deepseek-v3";
  for (const char* ids : {"1,999999999", "-1", "4294967297", "128815"}) {
    auto [rc, out] = Dsinfer("detokenize --tokenizer " + tok + " --ids " + ids);
    EXPECT_EQ(rc, 2) << ids << "\n" << out;
    EXPECT_NE(out.find("is outside the vocabulary [0, 128815)"), std::string::npos) << ids << "\n" << out;
  }
  auto [rc, out] = Dsinfer("detokenize --tokenizer " + tok + " --ids 128814");
  EXPECT_EQ(rc, 0) << out;
}

TEST(CliUsage, CpuRefusesAModelLargerThanMemoryBeforeWritingDummyWeights) {
  // DeepSeek-V3 in fp32 is 2.5 TiB: the CPU runner must refuse it up front instead of writing
  // a 1.3 TB bf16 dummy checkpoint under $TMPDIR and then running out of memory.
  auto [rc, out] = Dsinfer("bench one-batch --model " + std::string(DS_SHARED_DIR) +
                           "/models/deepseek-v3 --load-format dummy");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("the CPU runner keeps weights in fp32: 2499.8 GiB for 61 layers"), std::string::npos) << out;
}

TEST(CliUsage, UnknownTwoWordCommandIsNamed) {
  auto [rc, out] = Dsinfer("bench bogus");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unknown command 'bench bogus'"), std::string::npos) << out;
  EXPECT_NE(out.find("bench serve"), std::string::npos) << out;  // the family is listed
}

TEST(CliUsage, OneBatchHelpShowsPlainNoWarmup) {
  auto [rc, out] = Dsinfer("bench one-batch --help");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--no-warmup "), std::string::npos) << out;
  EXPECT_EQ(out.find("{false}"), std::string::npos) << out;
}

}  // namespace
