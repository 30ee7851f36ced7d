// Integration: `dsinfer bench serve` (the real binary, DS_BINARY) against a Python stdlib
// mock OpenAI streaming server (tests/bench/mock_openai_server.py) over real HTTP on
// 127.0.0.1 with an OS-assigned port. Each run is bounded by `timeout`.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bench/arrival.h"
#include "bench/serve_bench.h"

namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / ("dsinfer_bsi_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Starts the mock server; stops it (SIGTERM to its pid) on destruction.
class MockServer {
 public:
  explicit MockServer(const std::string& args) {
    log_ = TempPath("mock_log_" + std::to_string(counter_++) + ".jsonl");
    std::remove(log_.c_str());
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      // tests/bench/ = the parent of DS_TEST_DATA_DIR (tests/data) + "bench" (lexically).
      std::string script =
          (fs::path(DS_TEST_DATA_DIR).parent_path() / "bench" / "mock_openai_server.py").string();
      std::string cmd = "exec python3 " + script + " --max-seconds 120 --log " + log_ + " " + args;
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    FILE* f = fdopen(fds[0], "r");
    char line[128] = {0};
    if (f && std::fgets(line, sizeof(line), f)) std::sscanf(line, "PORT %d", &port_);
    if (f) std::fclose(f);
  }
  ~MockServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st;
      waitpid(pid_, &st, 0);
    }
  }
  int port() const { return port_; }
  std::vector<nlohmann::json> Requests() const {
    std::vector<nlohmann::json> out;
    std::ifstream in(log_);
    std::string l;
    while (std::getline(in, l))
      if (!l.empty()) out.push_back(nlohmann::json::parse(l));
    return out;
  }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_;
};

struct RunResult {
  int rc = -1;
  std::string out;
  nlohmann::json json;
};

// `timeout` sends its signal (TERM unless `timeout_flags` says otherwise) after `limit`.
RunResult RunBench(const std::string& flags, const std::string& timeout_flags = "", const std::string& limit = "60") {
  static int n = 0;
  std::string json_path = TempPath("result_" + std::to_string(n++) + ".json");
  std::remove(json_path.c_str());
  std::string cmd = "timeout " + timeout_flags + " " + limit + " " + std::string(DS_BINARY) +
                    " bench serve --disable-tqdm --output-file " +
                    json_path + " " + flags + " 2>&1";
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, k);
  int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(json_path);
  if (in) r.json = nlohmann::json::parse(in, nullptr, false);
  return r;
}

bool HavePython() { return std::system("python3 -c 'import http.server' >/dev/null 2>&1") == 0; }

TEST(BenchServeIntegration, CompletionsRandomIdsConcurrencyAndMetrics) {
  if (!HavePython()) GTEST_SKIP() << "python3 not available";
  MockServer srv("--ttft-ms 30 --itl-ms 8");
  ASSERT_GT(srv.port(), 0);
  // 12 requests x 6 tokens, at most 3 in flight: 4 waves of >= 30 + 5*8 = 70 ms each.
  auto r = RunBench("--port " + std::to_string(srv.port()) +
                    " --num-prompts 12 --random-input-len 50 --random-output-len 6 --max-concurrency 3"
                    " --ignore-eos --num-gpus 2 --seed 3 --vocab-size 5000 --slo-ttft-ms 1000 --slo-tpot-ms 1");
  ASSERT_EQ(r.rc, 0) << r.out;
  ASSERT_TRUE(r.json.is_object()) << r.out;
  const auto& j = r.json;
  EXPECT_EQ(j["completed"], 12);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["model_id"], "mock-model");  // discovered via GET /v1/models
  EXPECT_EQ(j["total_input_tokens"], 12 * 50);
  EXPECT_EQ(j["total_output_tokens"], 12 * 6);
  double duration = j["duration"];
  EXPECT_GE(duration, 4 * 0.070);
  EXPECT_LT(duration, 10.0);
  EXPECT_LE(j["mean_concurrency"].get<double>(), 3.0 + 1e-6);
  EXPECT_GE(j["median_ttft_ms"].get<double>(), 30.0);
  EXPECT_LT(j["median_ttft_ms"].get<double>(), 30.0 + 500);
  EXPECT_GE(j["median_tpot_ms"].get<double>(), 8.0 * 0.95);
  EXPECT_LT(j["median_tpot_ms"].get<double>(), 8.0 * 5);
  EXPECT_GE(j["median_itl_ms"].get<double>(), 8.0 * 0.95);
  EXPECT_NEAR(j["output_throughput_per_gpu"].get<double>(), j["output_throughput"].get<double>() / 2, 1e-9);
  EXPECT_NEAR(j["output_throughput"].get<double>(), 72 / duration, 1e-6);
  EXPECT_EQ(j["slo_attainment"].get<double>(), 0.0);  // TPOT <= 1 ms is impossible here
  // What the server received.
  auto reqs = srv.Requests();
  ASSERT_EQ(reqs.size(), 12u);
  for (const auto& q : reqs) {
    EXPECT_EQ(q["path"], "/v1/completions");
    const auto& b = q["body"];
    ASSERT_TRUE(b["prompt"].is_array());
    EXPECT_EQ(b["prompt"].size(), 50u);
    for (const auto& t : b["prompt"]) {
      EXPECT_GE(t.get<int>(), 100);
      EXPECT_LT(t.get<int>(), 5000);
    }
    EXPECT_EQ(b["max_tokens"], 6);
    EXPECT_EQ(b["min_tokens"], 6);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
  }
  EXPECT_NE(r.out.find("Serving Benchmark Result"), std::string::npos);
}

TEST(BenchServeIntegration, FailuresAreCountedNotFatal) {
  if (!HavePython()) GTEST_SKIP() << "python3 not available";
  MockServer srv("--ttft-ms 1 --itl-ms 1 --fail-every 3");
  ASSERT_GT(srv.port(), 0);
  auto r = RunBench("--base-url http://127.0.0.1:" + std::to_string(srv.port()) +
                    " --model mock-model --num-prompts 9 --random-input-len 8 --random-output-len 4"
                    " --max-concurrency 1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.json["completed"], 6);
  EXPECT_EQ(r.json["failed"], 3);
  ASSERT_FALSE(r.json["errors"].empty());
  EXPECT_NE(r.json["errors"][0].get<std::string>().find("HTTP 500"), std::string::npos);

  // A wrong model name: every request fails with the server's 404; exit code 1, no crash.
  auto bad = RunBench("--port " + std::to_string(srv.port()) +
                      " --model nope --num-prompts 2 --random-input-len 8 --random-output-len 4");
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_EQ(bad.json["failed"], 2);
}

// SIGINT / SIGTERM mid-run (what `timeout` sends a replay that runs over its budget): the
// client stops sending, cancels the streams in flight and still writes its report and JSON
// over the requests that ended. 30 requests at 10 req/s (~3 s of arrivals), each ~20 + 9 x 40
// ms long, stopped after 1.2 s: some completed, some cut off in flight, the rest never sent.
TEST(BenchServeIntegration, SignalStopsTheRunAndReportsWhatEnded) {
  if (!HavePython()) GTEST_SKIP() << "python3 not available";
  for (const char* sig : {"-s INT", "-s TERM"}) {
    MockServer srv("--ttft-ms 20 --itl-ms 40");
    ASSERT_GT(srv.port(), 0);
    auto r = RunBench("--port " + std::to_string(srv.port()) +
                          " --num-prompts 30 --random-input-len 8 --random-output-len 10 --ignore-eos"
                          " --request-rate 10 --seed 1",
                      std::string("-k 20 ") + sig, "1.2");
    EXPECT_EQ(r.rc, 124) << sig << ": timeout's status when it had to signal\n" << r.out;  // not 137: no KILL
    ASSERT_TRUE(r.json.is_object()) << sig << "\n" << r.out;
    const auto& j = r.json;
    EXPECT_EQ(j["interrupted"], true) << sig;
    const int completed = j["completed"], failed = j["failed"];
    const int cut = j["num_interrupted_in_flight"], not_sent = j["num_not_sent"];
    EXPECT_EQ(completed + failed, 30) << sig;
    EXPECT_EQ(cut + not_sent, failed) << sig;  // the mock fails nothing by itself
    EXPECT_GE(completed, 2) << sig;            // arrivals before ~0.8 s had time to finish
    EXPECT_GE(not_sent, 10) << sig;            // arrivals after ~2 s were never due
    EXPECT_LT(j["duration"].get<double>(), 1.2 + 1.0) << sig;
    EXPECT_GT(j["median_ttft_ms"].get<double>(), 0.0) << sig;  // figures over the completed ones
    EXPECT_NE(r.out.find("Run stopped by a signal"), std::string::npos) << sig;
    // The server saw no request that was not sent (one cut off while connecting may be unseen).
    const int seen = static_cast<int>(srv.Requests().size());
    EXPECT_LE(seen, 30 - not_sent) << sig;
    EXPECT_GE(seen, completed) << sig;
  }
  // A run that ends by itself reports interrupted = false.
  MockServer srv("--ttft-ms 1 --itl-ms 1");
  auto r = RunBench("--port " + std::to_string(srv.port()) + " --num-prompts 3 --random-input-len 8 --random-output-len 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.json["interrupted"], false);
}

TEST(BenchServeIntegration, ConnectionRefusedIsReported) {
  // A port with nothing listening: bind, read the port, close.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(s);
  auto r = RunBench("--port " + std::to_string(port) + " --model m --num-prompts 5 --max-concurrency 2");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.json["failed"], 5);
  EXPECT_NE(r.out.find("Connection refused"), std::string::npos) << r.out;
  // Without --model, the server must be reachable for discovery: clear error, exit 1.
  auto d = RunBench("--port " + std::to_string(port) + " --num-prompts 1");
  EXPECT_EQ(d.rc, 1);
  EXPECT_NE(d.out.find("pass --model"), std::string::npos) << d.out;
}

TEST(BenchServeIntegration, ChatShareGptCloseDelimitedAndBrokenStream) {
  if (!HavePython()) GTEST_SKIP() << "python3 not available";
  nlohmann::json conv = nlohmann::json::array();
  for (int i = 0; i < 4; ++i)
    conv.push_back({{"conversations", {{{"from", "human"}, {"value", "tell me about number " + std::to_string(i) + " please, at length"}},
                                       {{"from", "gpt"}, {"value", std::string(40 + 8 * i, 'x')}}}}});
  std::string path = TempPath("sharegpt.json");
  std::ofstream(path) << conv.dump();
  {
    MockServer srv("--ttft-ms 5 --itl-ms 1 --close-delimited");
    ASSERT_GT(srv.port(), 0);
    auto r = RunBench("--port " + std::to_string(srv.port()) +
                      " --backend openai-chat --dataset-name sharegpt --dataset-path " + path + " --num-prompts 4");
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(r.json["completed"], 4);
    EXPECT_EQ(r.json["endpoint"], "/v1/chat/completions");
    // Output lengths = the gpt turns' estimated token counts (4 bytes per token).
    EXPECT_EQ(r.json["total_output_tokens"], 10 + 12 + 14 + 16);
    auto reqs = srv.Requests();
    ASSERT_EQ(reqs.size(), 4u);
    for (const auto& q : reqs) {
      EXPECT_EQ(q["path"], "/v1/chat/completions");
      EXPECT_EQ(q["body"]["messages"][0]["role"], "user");
      EXPECT_NE(q["body"]["messages"][0]["content"].get<std::string>().find("tell me about"), std::string::npos);
    }
  }
  // A stream cut mid-way (chunked encoding, no terminating chunk) is a failed request.
  nlohmann::json brk = nlohmann::json::array();
  brk.push_back({{"conversations", {{{"from", "human"}, {"value", "please BREAK the stream now"}},
                                    {{"from", "gpt"}, {"value", std::string(40, 'y')}}}}});
  brk.push_back(conv[0]);
  std::string path2 = TempPath("sharegpt_break.json");
  std::ofstream(path2) << brk.dump();
  MockServer srv2("--ttft-ms 1 --itl-ms 1");
  auto r2 = RunBench("--port " + std::to_string(srv2.port()) +
                     " --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path " + path2);
  EXPECT_EQ(r2.rc, 0) << r2.out;
  EXPECT_EQ(r2.json["completed"], 1);
  EXPECT_EQ(r2.json["failed"], 1);
}

TEST(BenchServeIntegration, TraceReplayTimingAndPrefixHits) {
  if (!HavePython()) GTEST_SKIP() << "python3 not available";
  // Three requests; 2 and 3 share 2 and 1 leading 512-token blocks with earlier ones.
  std::string path = TempPath("trace.jsonl");
  std::ofstream(path) << "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 3, \"hash_ids\": [1, 2, 3]}\n"
                         "{\"timestamp\": 200, \"input_length\": 1200, \"output_length\": 3, \"hash_ids\": [1, 2, 4]}\n"
                         "{\"timestamp\": 400, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1, 9]}\n"
                         "{\"timestamp\": 900, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [5, 6]}\n";
  MockServer srv("--ttft-ms 2 --itl-ms 1");
  ASSERT_GT(srv.port(), 0);
  auto r = RunBench("--port " + std::to_string(srv.port()) + " --dataset-name trace --dataset-path " + path +
                    " --trace-time-scale 1.5 --trace-duration-s 0.5 --ignore-eos");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.json["completed"], 3);  // the request at 900 ms is past the first 0.5 s
  EXPECT_EQ(r.json["total_input_tokens"], 1100 + 1200 + 600);
  EXPECT_EQ(r.json["total_output_tokens"], 3 + 3 + 2);
  // Replay: the last request is sent at 400 ms x 1.5 = 0.6 s.
  EXPECT_GE(r.json["duration"].get<double>(), 0.6);
  // Server-side hits: request 2 reuses 2 blocks (1024 tokens), request 3 one (512).
  EXPECT_NEAR(r.json["prefix_cache_hit_rate"].get<double>(), 1536.0 / 2900, 1e-9);
  EXPECT_NEAR(r.json["trace_ideal_prefix_hit_rate"].get<double>(), 1536.0 / 2900, 1e-9);
  auto reqs = srv.Requests();
  ASSERT_EQ(reqs.size(), 3u);
  auto p0 = reqs[0]["body"]["prompt"].get<std::vector<int>>();
  auto p1 = reqs[1]["body"]["prompt"].get<std::vector<int>>();
  ASSERT_EQ(p0.size(), 1100u);
  ASSERT_EQ(p1.size(), 1200u);
  EXPECT_TRUE(std::equal(p0.begin(), p0.begin() + 1024, p1.begin()));
  EXPECT_NE(p0[1024], p1[1024]);
}

TEST(BenchServeIntegration, PoissonScheduleWarmupExtraBodyMetadata) {
  if (!HavePython()) GTEST_SKIP() << "python3 not available";
  MockServer srv("--ttft-ms 1 --itl-ms 1");
  ASSERT_GT(srv.port(), 0);
  auto r = RunBench("--port " + std::to_string(srv.port()) +
                    " --num-prompts 20 --request-rate 25 --seed 11 --random-input-len 16 --random-output-len 3"
                    " --warmup-requests 3 --extra-body '{\"top_k\": 5}' --metadata '{\"run\": \"x7\"}'");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.json["completed"], 20);
  EXPECT_EQ(r.json["request_rate"], 25.0);
  EXPECT_EQ(r.json["run"], "x7");
  // The run lasts at least until the last seeded Poisson arrival (~0.76 s at 25 req/s).
  double last = ds::bench::PoissonArrivals(20, 25.0, 11).back();
  EXPECT_GT(last, 0.3);
  EXPECT_GE(r.json["duration"].get<double>(), last);
  EXPECT_LT(r.json["duration"].get<double>(), last + 5.0);
  auto reqs = srv.Requests();
  ASSERT_EQ(reqs.size(), 23u);  // 3 warm-up + 20 measured
  for (const auto& q : reqs) EXPECT_EQ(q["body"]["top_k"], 5);
}

TEST(BenchServeIntegration, TextPromptsWithTheV3Tokenizer) {
  if (!HavePython()) GTEST_SKIP() << "python3 not available";
  const std::string tok = std::string(DS_SHARED_DIR) + "/models/deepseek-v3";
  if (!fs::exists(tok + "/tokenizer.json")) GTEST_SKIP() << "no shared tokenizer";
  auto codec = ds::bench::LoadTextCodec(tok);
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  MockServer srv("--ttft-ms 1 --itl-ms 1");
  ASSERT_GT(srv.port(), 0);
  // Completions: random ids become text of exactly 200 tokens.
  auto r = RunBench("--port " + std::to_string(srv.port()) +
                    " --num-prompts 6 --random-input-len 200 --random-output-len 3 --tokenizer " + tok);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.json["prompt_format"], "text");
  // Chat: the same through messages.
  auto c = RunBench("--port " + std::to_string(srv.port()) + " --backend openai-chat" +
                    " --num-prompts 4 --random-input-len 120 --random-output-len 3 --tokenizer " + tok);
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_EQ(c.json["completed"], 4);
  auto reqs = srv.Requests();
  ASSERT_EQ(reqs.size(), 10u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& b = reqs[i]["body"];
    std::string text = i < 6 ? b["prompt"].get<std::string>() : b["messages"][0]["content"].get<std::string>();
    EXPECT_EQ((*codec)->Encode(text).size(), i < 6 ? 200u : 120u) << i;
  }
  // A trace stays token ids unless asked.
  std::string trace = TempPath("tok_trace.jsonl");
  std::ofstream(trace) << "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1, 2]}\n";
  auto t = RunBench("--port " + std::to_string(srv.port()) + " --dataset-name trace --dataset-path " + trace +
                    " --tokenizer " + tok);
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_EQ(t.json["prompt_format"], "ids");
  auto all = srv.Requests();
  ASSERT_EQ(all.size(), 11u);
  ASSERT_TRUE(all[10]["body"]["prompt"].is_array());
  for (const auto& id : all[10]["body"]["prompt"]) EXPECT_LT(id.get<int>(), (*codec)->vocab_size() - 1000);
}

}  // namespace
