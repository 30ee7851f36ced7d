#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "bench/dataset.h"
#include "bench/request.h"

namespace ds::bench {
namespace {

namespace fs = std::filesystem;

std::string WriteTemp(const std::string& name, const std::string& content) {
  fs::path p = fs::temp_directory_path() / ("dsinfer_bench_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << content;
  return p.string();
}

TEST(BenchTrace, SharedHashIdsGiveSharedPrefixes) {
  TokenRange range = DefaultTokenRange(129280);
  EXPECT_EQ(range.lo, 100);
  EXPECT_EQ(range.hi, 127280);
  // Requests 1 and 2 share blocks 0 and 1 then diverge; request 3 shares only block 0.
  auto a = BuildTracePrompt({0, 1, 2}, 1400, range, 5, 0);
  auto b = BuildTracePrompt({0, 1, 3, 4}, 1900, range, 5, 1);
  auto c = BuildTracePrompt({0, 9}, 700, range, 5, 2);
  ASSERT_EQ(a.size(), 1400u);
  ASSERT_EQ(b.size(), 1900u);
  ASSERT_EQ(c.size(), 700u);
  auto common = [](const std::vector<int32_t>& x, const std::vector<int32_t>& y) {
    size_t n = 0;
    while (n < x.size() && n < y.size() && x[n] == y[n]) ++n;
    return n;
  };
  // Shared exactly the shared blocks (a random token coincides with probability ~1e-5).
  EXPECT_EQ(common(a, b), 1024u);
  EXPECT_EQ(common(a, c), 512u);
  // The block expansion is a pure function of (id, range, seed).
  EXPECT_EQ(TraceBlockTokens(3, range, 5), TraceBlockTokens(3, range, 5));
  EXPECT_NE(TraceBlockTokens(3, range, 5), TraceBlockTokens(3, range, 6));
  EXPECT_NE(TraceBlockTokens(3, range, 5), TraceBlockTokens(4, range, 5));
  std::vector<int32_t> blk3 = TraceBlockTokens(3, range, 5);
  EXPECT_TRUE(std::equal(blk3.begin(), blk3.end(), b.begin() + 1024));
  for (int32_t t : b) {
    EXPECT_GE(t, range.lo);
    EXPECT_LT(t, range.hi);
  }
  // Trimmed to input_length mid-block; the uncovered tail is unique per request.
  auto d = BuildTracePrompt({0}, 600, range, 5, 10);
  auto e = BuildTracePrompt({0}, 600, range, 5, 11);
  EXPECT_EQ(common(d, e), 512u);
  EXPECT_EQ(BuildTracePrompt({0, 1}, 300, range, 5, 0), std::vector<int32_t>(a.begin(), a.begin() + 300));
}

TEST(BenchTrace, LoadsSelectsScalesAndCountsReuse) {
  std::string path = WriteTemp("trace.jsonl",
                               "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 10, \"hash_ids\": [0, 1]}\n"
                               "{\"timestamp\": 500, \"input_length\": 1500, \"output_length\": 0, \"hash_ids\": [0, 1, 2]}\n"
                               "\n"
                               "{\"timestamp\": 1200, \"input_length\": 100, \"output_length\": 5}\n"
                               "{\"timestamp\": 2500, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 7]}\n");
  TraceStats st;
  TraceOptions opt;
  opt.time_scale = 2.0;
  opt.duration_s = 2.0;  // drops the request at 2.5 s
  auto r = LoadTrace(path, opt, &st);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_DOUBLE_EQ((*r)[1].arrival_s, 1.0);
  EXPECT_DOUBLE_EQ((*r)[2].arrival_s, 2.4);
  EXPECT_EQ((*r)[1].output_len, 1);  // at least one token
  EXPECT_EQ((*r)[1].hash_ids, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(st.requests, 3);
  EXPECT_EQ(st.input_tokens, 1024 + 1500 + 100);
  EXPECT_EQ(st.reusable_prefix_tokens, 1024);  // request 2 reuses blocks 0 and 1
  // Materialised prompts share that prefix.
  TokenRange range = DefaultTokenRange(32000);
  auto p0 = MaterializePrompt((*r)[0], range, 0, 0);
  auto p1 = MaterializePrompt((*r)[1], range, 0, 1);
  ASSERT_EQ(p1.size(), 1500u);
  EXPECT_TRUE(std::equal(p0.begin(), p0.end(), p1.begin()));

  opt = TraceOptions{};
  opt.max_requests = 2;
  EXPECT_EQ(LoadTrace(path, opt, nullptr).value().size(), 2u);

  std::string bad = WriteTemp("bad.jsonl", "{\"timestamp\": 0, \"input_length\": 5}\n");
  auto e = LoadTrace(bad, TraceOptions{}, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(":1:"), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("output_length"), std::string::npos);
  EXPECT_FALSE(LoadTrace("/nonexistent/trace.jsonl", TraceOptions{}, nullptr).ok());
}

TEST(BenchTrace, RealTraceFirstMinute) {
  std::string path = std::string(DS_SHARED_DIR) + "/traces/mooncake_conversation_trace.jsonl";
  if (!fs::exists(path)) GTEST_SKIP() << "no shared traces";
  TraceOptions opt;
  opt.duration_s = 60;
  TraceStats st;
  auto r = LoadTrace(path, opt, &st);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(st.requests, 10);
  EXPECT_LT(r->back().arrival_s, 60.0);
  EXPECT_GT(st.ideal_prefix_hit_rate(), 0.0);
  EXPECT_LT(st.ideal_prefix_hit_rate(), 1.0);
}

TEST(BenchRandom, LengthsTokensAndSeed) {
  TokenRange range{100, 30000};
  auto a = MakeRandomRequests(500, 1000, 200, 0.5, range, 9);
  auto b = MakeRandomRequests(500, 1000, 200, 0.5, range, 9);
  ASSERT_EQ(a.size(), 500u);
  int min_in = 1 << 30, max_in = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_ids, b[i].prompt_ids);
    EXPECT_EQ(static_cast<int>(a[i].prompt_ids.size()), a[i].input_len);
    EXPECT_GE(a[i].input_len, 500);
    EXPECT_LE(a[i].input_len, 1500);
    EXPECT_GE(a[i].output_len, 100);
    EXPECT_LE(a[i].output_len, 300);
    min_in = std::min(min_in, a[i].input_len);
    max_in = std::max(max_in, a[i].input_len);
    for (int32_t t : a[i].prompt_ids) ASSERT_TRUE(t >= 100 && t < 30000);
  }
  EXPECT_LT(min_in, 600);  // the range is actually used
  EXPECT_GT(max_in, 1400);
  auto fixed = MakeRandomRequests(3, 64, 8, 0.0, range, 1);
  for (auto& r : fixed) {
    EXPECT_EQ(r.input_len, 64);
    EXPECT_EQ(r.output_len, 8);
  }
  EXPECT_NE(fixed[0].prompt_ids, fixed[1].prompt_ids);
}

// A codec that maps each whitespace-separated word to one token (for exact counts).
class WordCodec : public TextCodec {
 public:
  std::vector<int32_t> Encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    bool in_word = false;
    for (char ch : text) {
      bool sp = ch == ' ' || ch == '\n';
      if (!sp && !in_word) ids.push_back(1);
      in_word = !sp;
    }
    return ids;
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) {  // appended piece by piece (GCC 12's -Wrestrict false positive on "w" + string)
      s += 'w';
      s += std::to_string(id);
      s += ' ';
    }
    return s;
  }
  int vocab_size() const override { return 1000; }
};

TEST(BenchShareGpt, JsonAndJsonl) {
  nlohmann::json arr = nlohmann::json::array();
  arr.push_back({{"id", "a"}, {"conversations", {{{"from", "human"}, {"value", "one two three four five"}},
                                                 {{"from", "gpt"}, {"value", "r1 r2 r3 r4 r5 r6"}}}}});
  arr.push_back({{"id", "short"}, {"conversations", {{{"from", "human"}, {"value", "hi"}},
                                                     {{"from", "gpt"}, {"value", "a b c d e"}}}}});
  arr.push_back({{"id", "noreply"}, {"conversations", {{{"from", "human"}, {"value", "a b c d e"}}}}});
  arr.push_back({{"id", "sys"}, {"messages", {{{"role", "system"}, {"content", "be nice"}},
                                              {{"role", "user"}, {"content", "u1 u2 u3 u4"}},
                                              {{"role", "assistant"}, {"content", "x1 x2 x3 x4 x5 x6 x7"}}}}});
  std::string path = WriteTemp("sharegpt.json", arr.dump());
  WordCodec codec;
  ShareGptOptions opt;
  opt.codec = &codec;
  opt.seed = 1;
  auto r = LoadShareGpt(path, opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);  // "short" (2-token... 1-word prompt) and "noreply" are filtered
  std::map<std::string, std::pair<int, int>> got;
  for (const auto& q : *r) got[q.prompt_text] = {q.input_len, q.output_len};
  EXPECT_EQ(got["one two three four five"], std::make_pair(5, 6));
  EXPECT_EQ(got["u1 u2 u3 u4"], std::make_pair(4, 7));

  // JSONL, no tokenizer (4 bytes per token estimate), fixed output length, cap.
  std::string jl;
  for (auto& e : arr) jl += e.dump() + "\n";
  std::string path2 = WriteTemp("sharegpt.jsonl", jl);
  ShareGptOptions opt2;
  opt2.fixed_output_len = 32;
  opt2.filter = false;
  opt2.num_requests = 2;
  auto r2 = LoadShareGpt(path2, opt2);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  ASSERT_EQ(r2->size(), 2u);
  for (const auto& q : *r2) {
    EXPECT_EQ(q.output_len, 32);
    EXPECT_EQ(q.input_len, static_cast<int>((q.prompt_text.size() + 3) / 4));
  }
  EXPECT_FALSE(LoadShareGpt(WriteTemp("empty.json", "[]"), ShareGptOptions{}).ok());
  EXPECT_FALSE(LoadShareGpt(WriteTemp("broken.jsonl", "{\"a\":\n"), ShareGptOptions{}).ok());
}

TEST(BenchRequestBody, CompletionsIdsChatTextAndIgnoreEos) {
  BenchRequest r;
  r.prompt_ids = {5, 6, 7};
  r.input_len = 3;
  r.output_len = 16;
  RequestBodyOptions o;
  o.model = "m";
  o.ignore_eos = true;
  auto body = BuildRequestBody(o, r, 0);
  ASSERT_TRUE(body.ok());
  auto j = nlohmann::json::parse(*body);
  EXPECT_EQ(j["prompt"], nlohmann::json::array({5, 6, 7}));
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["max_tokens"], 16);
  EXPECT_EQ(j["min_tokens"], 16);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);

  o.backend = Backend::kChat;
  EXPECT_FALSE(BuildRequestBody(o, r, 0).ok());  // token prompt, no codec
  WordCodec codec;
  o.codec = &codec;
  o.ignore_eos = false;
  o.extra_body = {{"temperature", 0.7}, {"top_p", 0.9}};
  auto chat = nlohmann::json::parse(BuildRequestBody(o, r, 0).value());
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_EQ(chat["messages"][0]["content"], "w5 w6 w7 ");
  EXPECT_FALSE(chat.contains("ignore_eos"));
  EXPECT_EQ(chat["temperature"], 0.7);
  EXPECT_EQ(chat["top_p"], 0.9);

  // Trace requests expand hash_ids at body time.
  BenchRequest t;
  t.hash_ids = {4};
  t.input_len = 10;
  t.output_len = 2;
  RequestBodyOptions ot;
  ot.model = "m";
  ot.range = DefaultTokenRange(32000);
  auto tj = nlohmann::json::parse(BuildRequestBody(ot, t, 3).value());
  auto blk = TraceBlockTokens(4, ot.range, 0);
  EXPECT_EQ(tj["prompt"].get<std::vector<int32_t>>(), std::vector<int32_t>(blk.begin(), blk.begin() + 10));
}

}  // namespace
}  // namespace ds::bench

namespace ds::bench {
namespace {

// A BPE-like codec: id 1 = "a", 2 = "b", 3 = "ab"; Encode merges "ab" greedily. Decoding
// random ids and re-encoding changes the count at the seams ([1, 2] -> [3]), as real BPE does.
class SeamCodec : public TextCodec {
 public:
  std::vector<int32_t> Encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == 'a' && i + 1 < text.size() && text[i + 1] == 'b') {
        ids.push_back(3);
        ++i;
      } else {
        ids.push_back(text[i] == 'a' ? 1 : 2);
      }
    }
    return ids;
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) s += id == 1 ? "a" : id == 2 ? "b" : "ab";
    return s;
  }
  int vocab_size() const override { return 4; }
};

TEST(BenchRandom, FitTextPromptHitsTheTargetLength) {
  SeamCodec c;
  int actual = 0;
  // "ababa" re-encodes to 3 tokens; the fit extends it back to 5.
  std::string t = FitTextPrompt(c, {1, 2, 1, 2, 1}, 5, &actual);
  EXPECT_EQ(actual, 5);
  EXPECT_EQ(c.Encode(t).size(), 5u);
  // Longer than asked after re-encoding: trimmed.
  t = FitTextPrompt(c, {2, 2, 2, 2, 3, 3}, 4, &actual);
  EXPECT_EQ(actual, 4);
  EXPECT_EQ(static_cast<int>(c.Encode(t).size()), actual);
}

}  // namespace
}  // namespace ds::bench
