// Integration: `dsinfer bench serve` against the real `dsinfer serve` (CPU, the engine's fake
// runner: no weights, deterministic tokens, 1 ms per step), over real HTTP on 127.0.0.1 with
// an OS-chosen port. Skipped while the server is not in the build.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

std::string Tmp(const std::string& n) {
  return (fs::temp_directory_path() / ("dsinfer_bsd_" + std::to_string(getpid()) + "_" + n)).string();
}

bool HaveServe() {
  std::string cmd = std::string(DS_BINARY) + " serve --help >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0 && fs::exists(fs::path(DS_TEST_DATA_DIR) / "serve_fake" / "config.json");
}

// `dsinfer serve --load-format fake --port 0`; reads "listening on HOST:PORT" from its stdout.
class DsinferServer {
 public:
  explicit DsinferServer(const std::string& extra_flags = "") {
    static int instance = 0;
    out_ = Tmp("serve" + std::to_string(instance++) + ".out");
    std::string cmd = "exec timeout 300 " + std::string(DS_BINARY) + " serve --model " + DS_TEST_DATA_DIR +
                      "/serve_fake --tokenizer byte --load-format fake --port 0 --served-model-name bench-test"
                      " --host 127.0.0.1 " + extra_flags + " > " + out_ + " 2> " + out_ + ".log";
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 300 && port_ == 0; ++i) {
      usleep(100000);
      std::ifstream f(out_);
      std::string line;
      while (std::getline(f, line)) {
        auto at = line.find("listening on ");
        if (at != std::string::npos) port_ = std::atoi(line.c_str() + line.rfind(':') + 1);
      }
    }
  }
  ~DsinferServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st;
      waitpid(pid_, &st, 0);
    }
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string out_;
};

std::pair<int, nlohmann::json> Bench(const std::string& flags, std::string* out) {
  static int n = 0;
  std::string name = std::to_string(n++);  // "r<n>.json", built without "r" + string (GCC 12 -Wrestrict)
  name.insert(name.begin(), 'r');
  name += ".json";
  std::string json = Tmp(name);
  std::string cmd = "timeout 120 ";  // appended piece by piece (GCC 12's -Wrestrict false positive)
  cmd += DS_BINARY;
  cmd += " bench serve --disable-tqdm --output-file ";
  cmd += json;
  cmd += ' ';
  cmd += flags;
  cmd += " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, k);
  int st = pclose(p);
  nlohmann::json j;
  std::ifstream f(json);
  if (f) j = nlohmann::json::parse(f, nullptr, false);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, j};
}

TEST(BenchServeDsinfer, RandomIdsAndTraceAgainstRealServer) {
  if (!HaveServe()) GTEST_SKIP() << "dsinfer serve is not in this build";
  DsinferServer srv;
  ASSERT_GT(srv.port(), 0) << "server did not report its port";
  const std::string port = std::to_string(srv.port());
  std::string out;
  // Model discovered from /v1/models; token-id prompts within the fake model's 300-token vocab.
  // 200-token prompts fill 3 KV blocks: a warm-up that reused the measured prompts would show
  // up as prefix-cache hits (the warm-up must use prompts of its own).
  auto [rc, j] = Bench("--port " + port + " --num-prompts 16 --random-input-len 200 --random-output-len 12"
                       " --max-concurrency 4 --ignore-eos --vocab-size 300 --warmup-requests 2", &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(j["model_id"], "bench-test");
  EXPECT_EQ(j["completed"], 16) << out;
  EXPECT_EQ(j["failed"], 0) << out;
  EXPECT_EQ(j["total_output_tokens"], 16 * 12);  // ignore_eos + min_tokens honoured
  EXPECT_EQ(j["total_input_tokens"], 16 * 200);
  ASSERT_TRUE(j.contains("prefix_cache_hit_rate")) << out;
  EXPECT_EQ(j["prefix_cache_hit_rate"].get<double>(), 0.0) << out;
  EXPECT_GT(j["median_ttft_ms"].get<double>(), 0);
  EXPECT_GT(j["median_tpot_ms"].get<double>(), 0.5);  // >= ~1 ms per engine step
  EXPECT_LE(j["mean_concurrency"].get<double>(), 4.0 + 1e-6);

  // Trace replay: requests sharing hash_ids blocks; a prefix-caching server reports hits.
  std::string trace = Tmp("trace.jsonl");
  std::ofstream(trace) << "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 4, \"hash_ids\": [1, 2, 3]}\n"
                          "{\"timestamp\": 300, \"input_length\": 1200, \"output_length\": 4, \"hash_ids\": [1, 2, 4]}\n"
                          "{\"timestamp\": 600, \"input_length\": 700, \"output_length\": 4, \"hash_ids\": [1, 5]}\n";
  out.clear();
  auto [rc2, t] = Bench("--port " + port + " --dataset-name trace --dataset-path " + trace +
                        " --ignore-eos --vocab-size 300", &out);
  ASSERT_EQ(rc2, 0) << out;
  EXPECT_EQ(t["completed"], 3) << out;
  EXPECT_EQ(t["total_output_tokens"], 12);
  EXPECT_GE(t["duration"].get<double>(), 0.6);
  if (t.contains("prefix_cache_hit_rate")) { EXPECT_GT(t["prefix_cache_hit_rate"].get<double>(), 0.0) << out; }
}

// `--tokenizer byte` on both sides: text prompts (chat endpoint) against a byte-tokenizer server
// count exactly the asked tokens.
TEST(BenchServeDsinfer, ChatWithTheByteTokenizer) {
  if (!HaveServe()) GTEST_SKIP() << "dsinfer serve is not in this build";
  DsinferServer srv;
  ASSERT_GT(srv.port(), 0);
  std::string out;
  auto [rc, j] = Bench("--port " + std::to_string(srv.port()) + " --backend openai-chat --tokenizer byte"
                       " --num-prompts 6 --random-input-len 60 --random-output-len 5 --ignore-eos",
                       &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(j["completed"], 6) << out;
  EXPECT_EQ(j["failed"], 0) << out;
  EXPECT_EQ(j["total_output_tokens"], 6 * 5);
}

// Data parallelism: two engines (DP ranks) behind one server, requests placed by the least
// context tokens in flight. Every request completes, and /metrics reports both ranks.
TEST(BenchServeDsinfer, DataParallelTwoRanks) {
  if (!HaveServe()) GTEST_SKIP() << "dsinfer serve is not in this build";
  DsinferServer srv("--dp-size 2 --load-balance-method minimum_tokens");
  ASSERT_GT(srv.port(), 0) << "server did not report its port";
  std::string out;
  auto [rc, j] = Bench("--port " + std::to_string(srv.port()) + " --num-prompts 24 --random-input-len 100"
                       " --random-output-len 10 --random-range-ratio 0.5 --max-concurrency 8 --ignore-eos --vocab-size 300",
                       &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(j["completed"], 24) << out;
  EXPECT_EQ(j["failed"], 0) << out;
  std::string metrics;
  FILE* p = popen(("curl -s http://127.0.0.1:" + std::to_string(srv.port()) + "/metrics").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof(buf), p)) > 0) metrics.append(buf, k);
  pclose(p);
  EXPECT_NE(metrics.find("dsinfer:dp_rank_requests_in_flight{model_name=\"bench-test\",dp_rank=\"0\"}"), std::string::npos) << metrics;
  // Both ranks generated tokens, and together exactly what the client received.
  long long gen[2] = {-1, -1};
  for (int r = 0; r < 2; ++r) {
    const std::string key = "dsinfer:dp_rank_generation_tokens_total{model_name=\"bench-test\",dp_rank=\"" +
                            std::to_string(r) + "\"} ";
    auto at = metrics.find(key);
    ASSERT_NE(at, std::string::npos) << metrics;
    gen[r] = std::atoll(metrics.c_str() + at + key.size());
  }
  EXPECT_GT(gen[0], 0);
  EXPECT_GT(gen[1], 0);
  EXPECT_EQ(gen[0] + gen[1], j["total_output_tokens"].get<long long>());
  EXPECT_NE(metrics.find("dsinfer:request_success_total{model_name=\"bench-test\",finished_reason=\"length\"} 24"),
            std::string::npos) << metrics;
}

}  // namespace
