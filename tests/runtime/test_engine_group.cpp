// EngineGroup (runtime/engine_group.h): data-parallel ranks over FakeModelRunners. Outputs equal
// the single-engine reference whatever rank serves a request; minimum_tokens balances context
// tokens in flight; aborts follow requests to their rank; stats are sums.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "../scheduler/byte_decoder.h"
#include "runtime/engine_group.h"
#include "runtime/fake_model_runner.h"

namespace ds {
namespace {

using test::ByteDecoder;

ModelConfig Cfg() {
  ModelConfig c;
  c.vocab_size = 300;
  c.max_position_embeddings = 4096;
  return c;
}

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((seed * 31 + i * 7) % 250 + 1);
  return p;
}

std::vector<int32_t> ReferenceGreedy(std::vector<int32_t> toks, int n) {
  std::vector<int32_t> out;
  std::vector<float> logits(300);
  for (int i = 0; i < n; ++i) {
    FakeModelRunner::ReferenceLogits(toks, 300, logits.data());
    int best = 0;
    for (int v = 1; v < 300; ++v) if (logits[v] > logits[best]) best = v;
    out.push_back(best);
    toks.push_back(best);
  }
  return out;
}

struct Rig {
  FakeModelRunner r0{Cfg(), 256}, r1{Cfg(), 256};
  ByteDecoder dec;
  EngineOptions o = [] { EngineOptions x; x.stats_interval_s = 0; return x; }();
  Engine e0{&r0, &dec, o}, e1{&r1, &dec, o};
  std::mutex mu;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, std::string> reason;
  OutputCallback For() {
    return [this](EngineOutput&& out) {
      std::lock_guard<std::mutex> lock(mu);
      auto& t = tokens[out.request_id];
      t.insert(t.end(), out.token_ids.begin(), out.token_ids.end());
      if (out.finished) reason[out.request_id] = out.finish_reason;
    };
  }
  void RunAll() {
    for (int i = 0; i < 100000 && (e0.num_in_flight() + e1.num_in_flight()) > 0; ++i) {
      e0.Step();
      e1.Step();
    }
  }
};

EngineRequest Req(uint64_t id, std::vector<int32_t> prompt, int max_tokens, OutputCallback cb) {
  EngineRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  r.on_output = std::move(cb);
  return r;
}

TEST(EngineGroup, MinimumTokensBalancesContextAndOutputsMatchReference) {
  Rig rig;
  EngineGroup g({&rig.e0, &rig.e1}, std::move(MakeDpPolicy("minimum_tokens")).value());
  // A long prompt first (rank 0), then short ones: they go to rank 1 until its context tokens
  // catch up with rank 0's.
  ASSERT_TRUE(g.Add(Req(1, Prompt(400, 1), 8, rig.For())).ok());
  EXPECT_EQ(g.RankOf(1), 0);
  for (uint64_t id = 2; id <= 5; ++id) {
    ASSERT_TRUE(g.Add(Req(id, Prompt(90, static_cast<int>(id)), 8, rig.For())).ok());
    EXPECT_EQ(g.RankOf(id), 1) << "request " << id;  // 90..360 tokens on rank 1 < 400 on rank 0
  }
  ASSERT_TRUE(g.Add(Req(6, Prompt(90, 6), 8, rig.For())).ok());
  EXPECT_EQ(g.RankOf(6), 1);  // 360 < 400 on rank 0: still rank 1 (now 450)
  ASSERT_TRUE(g.Add(Req(7, Prompt(90, 7), 8, rig.For())).ok());
  EXPECT_EQ(g.RankOf(7), 0);  // 400 < 450
  EXPECT_EQ(rig.e0.context_tokens_in_flight(), 490);
  EXPECT_EQ(rig.e1.context_tokens_in_flight(), 450);
  EXPECT_EQ(g.num_in_flight(), 7);
  rig.RunAll();
  for (uint64_t id = 1; id <= 7; ++id) {
    const int n = id == 1 ? 400 : 90;
    EXPECT_EQ(rig.tokens[id], ReferenceGreedy(Prompt(n, static_cast<int>(id)), 8)) << "request " << id;
    EXPECT_EQ(rig.reason[id], "length");
    EXPECT_EQ(g.RankOf(id), -1);  // forgotten once finished
  }
  EXPECT_EQ(rig.e0.context_tokens_in_flight(), 0);
  EXPECT_EQ(rig.e1.context_tokens_in_flight(), 0);
  const EngineStats st = g.Stats();
  EXPECT_EQ(st.generation_tokens_total, 7 * 8);
  EXPECT_EQ(st.requests_finished_length, 7);
  EXPECT_EQ(st.num_blocks_total, rig.e0.num_kv_blocks() + rig.e1.num_kv_blocks());
  std::string text;
  g.RenderHistogram(&Engine::ttft, "x_ttft", "h", "", &text);
  EXPECT_NE(text.find("x_ttft_count{} 7"), std::string::npos) << text;
}

TEST(EngineGroup, AbortFollowsTheRequestAndStopAdmissionRefuses) {
  Rig rig;
  EngineGroup g({&rig.e0, &rig.e1}, std::move(MakeDpPolicy("round_robin")).value());
  ASSERT_TRUE(g.Add(Req(10, Prompt(50, 1), 200, rig.For())).ok());
  ASSERT_TRUE(g.Add(Req(11, Prompt(50, 2), 200, rig.For())).ok());
  EXPECT_EQ(g.RankOf(10), 0);
  EXPECT_EQ(g.RankOf(11), 1);
  rig.e0.Step();
  rig.e1.Step();
  g.Abort(11);
  rig.RunAll();
  EXPECT_EQ(rig.reason[11], "abort");
  EXPECT_EQ(rig.reason[10], "length");
  EXPECT_EQ(rig.tokens[10].size(), 200u);
  g.StopAdmission();
  EXPECT_TRUE(g.admission_stopped());
  Status st = g.Add(Req(12, Prompt(10, 3), 4, rig.For()));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(g.RankOf(12), -1);
}

}  // namespace
}  // namespace ds
