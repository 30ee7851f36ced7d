// Engine tests over FakeModelRunner: outputs must equal the reference (a pure function of the
// token sequence) under every batching, chunking, prefix-caching and preemption schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>

#include "../scheduler/byte_decoder.h"
#include "runtime/engine.h"
#include "runtime/fake_model_runner.h"

namespace ds {
namespace {

using test::ByteDecoder;

ModelConfig TinyConfig(int vocab) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.max_position_embeddings = 4096;
  return c;
}

// Greedy reference continuation computed without the engine.
std::vector<int32_t> ReferenceGreedy(std::vector<int32_t> toks, int n, int vocab) {
  std::vector<int32_t> out;
  std::vector<float> logits(vocab);
  for (int i = 0; i < n; ++i) {
    FakeModelRunner::ReferenceLogits(toks, vocab, logits.data());
    int best = 0;
    for (int v = 1; v < vocab; ++v) if (logits[v] > logits[best]) best = v;
    out.push_back(best);
    toks.push_back(best);
  }
  return out;
}

struct Collector {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, std::string> text;
  std::map<uint64_t, EngineOutput> final_out;
  OutputCallback For(uint64_t) {
    return [this](EngineOutput&& o) {
      auto& t = tokens[o.request_id];
      t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
      text[o.request_id] += o.text;
      if (o.finished) final_out[o.request_id] = o;
    };
  }
};

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((seed * 31 + i * 7) % 250 + 1);
  return p;
}

void RunToCompletion(Engine& e, int max_steps = 100000) {
  for (int i = 0; i < max_steps && (e.num_in_flight() > 0); ++i) {
    e.Step();
    e.CheckInvariants();
  }
  ASSERT_EQ(e.num_in_flight(), 0);
}

struct Case { int budget; int max_running; int blocks; bool prefix; double reserve = 0; };

class EngineMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(EngineMatrix, GreedyMatchesReferenceUnderAnySchedule) {
  const Case c = GetParam();
  const int V = 300;
  FakeModelRunner runner(TinyConfig(V), c.blocks);
  ByteDecoder dec;
  EngineOptions o;
  o.max_num_batched_tokens = c.budget;
  o.max_running_requests = c.max_running;
  o.enable_prefix_caching = c.prefix;
  o.decode_reserve_ratio = c.reserve;
  o.stats_interval_s = 0;
  Engine e(&runner, &dec, o);
  Collector col;
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (uint64_t id = 1; id <= 12; ++id) {
    // Half the requests share a 130-token prefix (prefix-cache reuse).
    std::vector<int32_t> p = Prompt(130, 1);
    auto tail = Prompt(static_cast<int>(id * 13 % 90) + 1, static_cast<int>(id));
    if (id % 2) p.insert(p.end(), tail.begin(), tail.end()); else p = Prompt(70 + static_cast<int>(id) * 5, static_cast<int>(id) + 100);
    prompts[id] = p;
    EngineRequest r;
    r.id = id;
    r.prompt = p;
    r.params.temperature = 0;
    r.params.max_tokens = 20 + static_cast<int>(id);
    r.params.ignore_eos = true;
    r.on_output = col.For(id);
    ASSERT_TRUE(e.Add(std::move(r)).ok());
  }
  RunToCompletion(e);
  for (auto& [id, p] : prompts) {
    EXPECT_EQ(col.tokens[id], ReferenceGreedy(p, 20 + static_cast<int>(id), V)) << "request " << id;
    EXPECT_EQ(col.final_out[id].finish_reason, "length");
  }
  auto st = e.Stats();
  EXPECT_EQ(st.num_blocks_used, 0);
  if (c.prefix && c.blocks >= 64 && c.budget < 100) {
    EXPECT_GT(st.prefix_hit_tokens, 0);
  }
  if (!c.prefix) {
    EXPECT_EQ(st.prefix_hit_tokens, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, EngineMatrix,
                         ::testing::Values(Case{4096, 64, 256, true},   // all at once
                                           Case{4096, 64, 256, false},
                                           Case{50, 64, 256, true},     // chunked prefill
                                           Case{37, 3, 256, true},      // few running
                                           Case{4096, 64, 12, true},    // tight pool: preemption
                                           Case{64, 64, 9, false},      // tight + chunked
                                           Case{4096, 64, 12, true, 1.0},  // admission reserve (all output)
                                           Case{64, 64, 9, false, 0.3}));  // reserve + chunked

// Runner-side sampling (what the CUDA runner does on the device) must give the same tokens
// as the engine's host sampling: same semantics, same (seed, step) RNG. Rows that need the
// logits (logprobs, penalties) keep host sampling, even mixed into the same step.
TEST(Engine, RunnerSamplingEqualsHostSampling) {
  const int V = 300;
  auto run = [&](bool runner_sampling, int64_t* forward_calls) {
    FakeEcho fe;
    fe.runner_sampling = runner_sampling;
    FakeModelRunner runner(TinyConfig(V), 256, fe);
    EXPECT_EQ(runner.CanSample(), runner_sampling);
    ByteDecoder dec;
    EngineOptions o;
    o.max_num_batched_tokens = 64;  // chunked prefill: sampling rows appear mid-batch
    o.stats_interval_s = 0;
    Engine e(&runner, &dec, o);
    Collector col;
    for (uint64_t id = 1; id <= 10; ++id) {
      EngineRequest r;
      r.id = id;
      r.prompt = Prompt(20 + static_cast<int>(id) * 9, static_cast<int>(id));
      r.params.temperature = id % 3 == 0 ? 0.0f : 0.9f;
      r.params.top_p = id % 2 ? 0.8f : 1.0f;
      r.params.top_k = id % 4 == 1 ? 20 : 0;
      r.params.seed = 1000 + id;
      if (id == 5) r.params.logprobs = 2;           // needs host logits
      if (id == 7) r.params.presence_penalty = 0.5f;  // needs host logits
      r.params.max_tokens = 30;
      r.params.ignore_eos = true;
      r.on_output = col.For(id);
      EXPECT_TRUE(e.Add(std::move(r)).ok());
    }
    RunToCompletion(e);
    *forward_calls = runner.num_forward_calls();
    return col.tokens;
  };
  int64_t calls_host = 0, calls_runner = 0;
  auto host = run(false, &calls_host);
  auto dev = run(true, &calls_runner);
  ASSERT_EQ(host.size(), 10u);
  EXPECT_EQ(calls_host, calls_runner);
  for (uint64_t id = 1; id <= 10; ++id) {
    EXPECT_EQ(host[id].size(), 30u);
    EXPECT_EQ(host[id], dev[id]) << "request " << id;
  }
}

TEST(Engine, RunnerSamplingValidation) {
  FakeModelRunner runner(TinyConfig(300), 8);  // cannot sample
  ForwardBatch b;
  b.token_ids = {1};
  b.positions = {0};
  b.query_start = {0, 1};
  b.context_lens = {1};
  b.block_tables = {0};
  b.max_blocks = 1;
  b.logits_indices = {0};
  b.sampling.push_back({});
  ForwardOutput out;
  EXPECT_FALSE(runner.Forward(b, &out).ok());
  b.sampling.push_back({});  // two entries for one row
  EXPECT_FALSE(b.Validate(8).ok());
  b.sampling.resize(1);
  b.sampling[0].top_p = 0.0f;
  EXPECT_FALSE(b.Validate(8).ok());
}

// ModelRunner's default Launch / Finish (the overlap-scheduling API over a synchronous runner):
// prev_sample_rows take the previous launched step's sampled ids, in any row order; outputs come
// back in launch order; misuse is a clear error.
TEST(Engine, RunnerLaunchFinishResolvesPrevSampleRows) {
  const int V = 300;
  FakeEcho fe;
  fe.runner_sampling = true;
  FakeModelRunner a(TinyConfig(V), 8, fe), b(TinyConfig(V), 8, fe);
  // Two sequences of 3 prompt tokens (blocks 0 and 1), greedy.
  ForwardBatch pre;
  pre.token_ids = {5, 6, 7, 8, 9, 10};
  pre.positions = {0, 1, 2, 0, 1, 2};
  pre.query_start = {0, 3, 6};
  pre.context_lens = {3, 3};
  pre.block_tables = {0, 1};
  pre.max_blocks = 1;
  pre.logits_indices = {2, 5};
  pre.sampling.assign(2, RowSampling{});
  // The decode step lists the sequences in the other order: rows {1, 0}.
  auto decode = [](std::vector<int32_t> ids) {
    ForwardBatch d;
    d.token_ids = std::move(ids);
    d.positions = {3, 3};
    d.query_start = {0, 1, 2};
    d.context_lens = {4, 4};
    d.block_tables = {1, 0};
    d.max_blocks = 1;
    d.logits_indices = {0, 1};
    d.sampling.assign(2, RowSampling{});
    return d;
  };
  ForwardOutput o1, o2;
  ASSERT_TRUE(a.Forward(pre, &o1).ok());
  ASSERT_TRUE(a.Forward(decode({o1.token_ids[1], o1.token_ids[0]}), &o2).ok());

  ForwardOutput f;
  EXPECT_EQ(b.Finish(&f).code(), StatusCode::kInvalidArgument);  // nothing launched
  ForwardBatch first = decode({0, 0});
  first.prev_sample_rows = {1, 0};
  EXPECT_EQ(b.Launch(first).code(), StatusCode::kInvalidArgument);  // no previous sampled step
  ASSERT_TRUE(b.Launch(pre).ok());
  ForwardBatch bad = decode({0, 0});
  bad.prev_sample_rows = {2, 0};  // the previous step sampled 2 rows
  EXPECT_EQ(b.Launch(bad).code(), StatusCode::kInvalidArgument);
  bad.prev_sample_rows = {0};     // one entry for two tokens
  EXPECT_FALSE(bad.Validate(8).ok());
  ForwardBatch next = decode({0, 0});
  next.prev_sample_rows = {1, 0};
  ASSERT_TRUE(b.Launch(next).ok());
  EXPECT_EQ(b.NumLaunched(), 2u);
  ASSERT_TRUE(b.Finish(&f).ok());
  EXPECT_EQ(f.token_ids, o1.token_ids);
  ASSERT_TRUE(b.Finish(&f).ok());
  EXPECT_EQ(f.token_ids, o2.token_ids);
  EXPECT_EQ(b.NumLaunched(), 0u);
  EXPECT_EQ(b.Finish(&f).code(), StatusCode::kInvalidArgument);
}

// min_overlapped: the share of steps the overlapped run must have launched early (with two
// running, 62 of 73 steps; without asking the policy while requests wait, it was 34).
struct OverlapCase { int blocks; int max_running; const char* what; double min_overlapped; };
class EngineOverlap : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(EngineOverlap, MatchesSerial) {
  const OverlapCase oc = GetParam();
  const int V = 300;
  const auto eos_ref = ReferenceGreedy(Prompt(10, 5), 40, V);
  struct Result {
    std::map<uint64_t, std::vector<int32_t>> tokens;
    std::map<uint64_t, std::string> text, reason;
    EngineStats stats;
  };
  auto run = [&](bool overlap) {
    FakeEcho fe;
    fe.runner_sampling = true;
    fe.overlap = overlap;
    FakeModelRunner runner(TinyConfig(V), oc.blocks, fe);
    ByteDecoder dec;
    EngineOptions o;
    o.max_num_batched_tokens = 48;  // chunked prefill
    o.max_running_requests = oc.max_running;
    o.stats_interval_s = 0;
    o.eos_token_ids = {eos_ref[6]};
    o.overlap_schedule = true;
    Engine e(&runner, &dec, o);
    Result res;
    bool arrived = false, aborted = false;
    std::function<void(uint64_t)> add;
    add = [&](uint64_t id) {
      EngineRequest r;
      r.id = id;
      r.prompt = id == 1 ? Prompt(10, 5) : Prompt(12 + static_cast<int>(id) * 7, static_cast<int>(id));
      r.params.temperature = id % 3 == 0 || id == 1 ? 0.0f : 0.8f;
      r.params.top_k = id % 2 ? 0 : 30;
      r.params.seed = 77 + id;
      r.params.max_tokens = 6 + static_cast<int>(id) * 5;
      r.params.ignore_eos = id % 4 == 2;
      if (id == 4) r.params.stop_token_ids = {eos_ref[3]};
      r.on_output = [&, id](EngineOutput&& out) {
        auto& t = res.tokens[id];
        t.insert(t.end(), out.token_ids.begin(), out.token_ids.end());
        res.text[id] += out.text;
        if (out.finished) res.reason[id] = out.finish_reason;
        if (id == 3 && t.size() >= 4 && !arrived) {  // arrivals during decode
          arrived = true;
          add(5);
          add(6);
        }
        if (id == 2 && t.size() >= 9 && !aborted) {  // an abort during decode
          aborted = true;
          e.Abort(2);
        }
      };
      ASSERT_TRUE(e.Add(std::move(r)).ok());
    };
    for (uint64_t id = 1; id <= 4; ++id) add(id);
    RunToCompletion(e);
    EXPECT_TRUE(arrived && aborted);
    res.stats = e.Stats();
    return res;
  };
  const Result serial = run(false), overlapped = run(true);
  std::printf("[metric] op=engine_overlap case=%s steps=%lld overlapped=%lld preemptions=%lld\n", oc.what,
              (long long)overlapped.stats.num_steps, (long long)overlapped.stats.num_overlapped_steps,
              (long long)overlapped.stats.num_preemptions);
  EXPECT_EQ(serial.stats.num_overlapped_steps, 0);
  EXPECT_GT(static_cast<double>(overlapped.stats.num_overlapped_steps),
            oc.min_overlapped * static_cast<double>(overlapped.stats.num_steps)) << oc.what;
  ASSERT_EQ(serial.tokens.size(), 6u);
  // Request 1 is greedy and ends at its first EOS.
  const size_t eos_at = std::find(eos_ref.begin(), eos_ref.end(), eos_ref[6]) - eos_ref.begin();
  EXPECT_EQ(serial.tokens.at(1), std::vector<int32_t>(eos_ref.begin(), eos_ref.begin() + eos_at + 1));
  EXPECT_EQ(serial.reason.at(1), "stop");
  for (uint64_t id = 1; id <= 6; ++id) {
    EXPECT_EQ(serial.tokens.at(id), overlapped.tokens.at(id)) << "request " << id;
    EXPECT_EQ(serial.text.at(id), overlapped.text.at(id)) << "request " << id;
    EXPECT_EQ(serial.reason.at(id), overlapped.reason.at(id)) << "request " << id;
  }
  EXPECT_EQ(serial.reason.at(2), "abort");
  EXPECT_EQ(serial.tokens.at(2).size(), 9u);
  EXPECT_EQ(overlapped.stats.num_blocks_used, 0);
  EXPECT_EQ(overlapped.stats.generation_tokens_total, serial.stats.generation_tokens_total);
}

// Overlap scheduling: launching the next decode step before the step in flight is processed
// must change nothing a client sees. The same tokens, texts and finish reasons as the serial
// engine under EOS, stop-token and length finishes, seeded sampling, chunked prefill, arrivals
// and an abort during the run (both triggered by tokens received, so both runs see them at the
// same point of the requests); and the overlapped run must have overlapped: with room for all,
// with two running at a time (requests wait: the policy is asked whether it would schedule just
// the decodes), and in a tight pool (preemption).
INSTANTIATE_TEST_SUITE_P(Schedules, EngineOverlap,
                         ::testing::Values(OverlapCase{64, 64, "room_for_all", 0.6},
                                           OverlapCase{64, 2, "two_running_queue", 0.7},
                                           OverlapCase{5, 64, "tight_pool", 0.5}),
                         [](const ::testing::TestParamInfo<OverlapCase>& i) { return std::string(i.param.what); });

TEST(Engine, PreemptionHappensInATightPool) {
  const int V = 300;
  FakeModelRunner runner(TinyConfig(V), 6);
  ByteDecoder dec;
  EngineOptions o;
  o.stats_interval_s = 0;
  Engine e(&runner, &dec, o);
  Collector col;
  for (uint64_t id = 1; id <= 4; ++id) {
    EngineRequest r;
    r.id = id;
    r.prompt = Prompt(60, static_cast<int>(id));
    r.params.temperature = 0;
    r.params.max_tokens = 60;
    r.params.ignore_eos = true;
    r.on_output = col.For(id);
    ASSERT_TRUE(e.Add(std::move(r)).ok());
  }
  RunToCompletion(e);
  EXPECT_GT(e.Stats().num_preemptions, 0);
  for (uint64_t id = 1; id <= 4; ++id)
    EXPECT_EQ(col.tokens[id], ReferenceGreedy(Prompt(60, static_cast<int>(id)), 60, V));
}

TEST(Engine, AbortFreesBlocksAtNextStep) {
  FakeModelRunner runner(TinyConfig(300), 64);
  ByteDecoder dec;
  EngineOptions o;
  o.stats_interval_s = 0;
  Engine e(&runner, &dec, o);
  Collector col;
  EngineRequest r;
  r.id = 7;
  r.prompt = Prompt(200, 3);
  r.params.max_tokens = 1000;
  r.params.ignore_eos = true;
  r.on_output = col.For(7);
  ASSERT_TRUE(e.Add(std::move(r)).ok());
  e.Step();
  e.Step();
  EXPECT_GT(e.Stats().num_blocks_used, 0);
  e.Abort(7);
  e.Step();
  EXPECT_EQ(e.Stats().num_blocks_used, 0);
  EXPECT_EQ(col.final_out[7].finish_reason, "abort");
  EXPECT_EQ(e.num_in_flight(), 0);
}

TEST(Engine, StopTokenEosAndStopString) {
  const int V = 300;
  FakeModelRunner runner(TinyConfig(V), 64);
  ByteDecoder dec;
  auto prompt = Prompt(10, 5);
  auto ref = ReferenceGreedy(prompt, 30, V);
  EngineOptions o;
  o.stats_interval_s = 0;
  o.eos_token_ids = {ref[4]};
  Engine e(&runner, &dec, o);
  Collector col;
  auto add = [&](uint64_t id, SamplingParams p) {
    EngineRequest r;
    r.id = id;
    r.prompt = prompt;
    p.temperature = 0;
    r.params = p;
    r.on_output = col.For(id);
    ASSERT_TRUE(e.Add(std::move(r)).ok());
  };
  SamplingParams eos; eos.max_tokens = 30;
  add(1, eos);
  SamplingParams ign = eos; ign.ignore_eos = true; ign.stop_token_ids = {ref[7]};
  add(2, ign);
  RunToCompletion(e);
  // EOS (first occurrence of ref[4]) ends request 1.
  size_t eos_at = std::find(ref.begin(), ref.end(), ref[4]) - ref.begin();
  EXPECT_EQ(col.tokens[1].size(), eos_at + 1);
  EXPECT_EQ(col.final_out[1].finish_reason, "stop");
  EXPECT_EQ(*col.final_out[1].stop_token, ref[4]);
  size_t st_at = std::find(ref.begin(), ref.end(), ref[7]) - ref.begin();
  EXPECT_EQ(col.tokens[2].size(), st_at + 1);
  EXPECT_EQ(*col.final_out[2].stop_token, ref[7]);
}

TEST(Engine, QueueLimitAndValidation) {
  FakeModelRunner runner(TinyConfig(300), 4);
  ByteDecoder dec;
  EngineOptions o;
  o.max_queued_requests = 2;
  o.max_model_len = 1000;
  o.stats_interval_s = 0;
  Engine e(&runner, &dec, o);
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.params.max_tokens = 4;
  r.id = 1; EXPECT_TRUE(e.Add(r).ok());
  r.id = 2; EXPECT_TRUE(e.Add(r).ok());
  r.id = 3; EXPECT_EQ(e.Add(r).code(), StatusCode::kResourceExhausted);
  EngineRequest bad = r;
  bad.prompt = {1, 300};
  EXPECT_EQ(e.Add(bad).code(), StatusCode::kInvalidArgument);
  bad.prompt = {1};
  bad.params.max_tokens = 1000;  // over max_model_len
  EXPECT_EQ(e.Add(bad).code(), StatusCode::kInvalidArgument);
  bad.params.max_tokens = 400;   // over the 4-block pool
  EXPECT_EQ(e.Add(bad).code(), StatusCode::kInvalidArgument);
  RunToCompletion(e);
}

TEST(Engine, ThreadedRunDeliversEverything) {
  const int V = 300;
  FakeModelRunner runner(TinyConfig(V), 128);
  ByteDecoder dec;
  EngineOptions o;
  o.stats_interval_s = 0;
  Engine e(&runner, &dec, o);
  e.Start();
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  for (uint64_t id = 1; id <= 50; ++id) {
    EngineRequest r;
    r.id = id;
    r.prompt = Prompt(20, static_cast<int>(id));
    r.params.max_tokens = 8;
    r.params.temperature = 0.8f;
    r.params.ignore_eos = true;
    r.on_output = [&](EngineOutput&& out) {
      if (out.finished) {
        std::lock_guard<std::mutex> l(mu);
        ++done;
        cv.notify_all();
      }
    };
    ASSERT_TRUE(e.Add(std::move(r)).ok());
  }
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return done == 50; }));
  l.unlock();
  e.Stop();
  EXPECT_EQ(e.Stats().generation_tokens_total, 400);
}

}  // namespace
}  // namespace ds
