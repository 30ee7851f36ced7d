// The CPU forward pass against transformers' goldens (scripts/make_fixtures.py) on every
// fixture under tests/data: per-position logits, greedy continuation, naive vs absorbed MLA,
// chunked prefill through the paged latent cache, and mixed batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/cpu_runner.h"

namespace ds {
namespace {

using json = nlohmann::json;

const char* kFixtures[] = {"v3_tiny", "v2_lite_tiny", "v2_glg_tiny", "v3_fp8_tiny", "v3_yarn_long",
                           "v3_rotate_half_tiny", "v3_mla512_tiny"};

std::string FixtureDir(const std::string& name) { return std::string(DS_TEST_DATA_DIR) + "/" + name; }

json LoadGolden(const std::string& name) {
  std::ifstream f(FixtureDir(name) + "/golden.json");
  EXPECT_TRUE(f.good()) << "missing golden.json for " << name;
  return json::parse(f);
}

std::unique_ptr<CpuModelRunner> MakeRunner(const std::string& name, MlaMode mode = MlaMode::kAuto) {
  CpuRunnerOptions o;
  o.num_kv_blocks = 12;
  o.mla_mode = mode;
  auto r = CpuModelRunner::Create(FixtureDir(name), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

// One sequence's view of the cache: its block table (deliberately scattered) and length.
struct Seq {
  std::vector<int32_t> blocks;
  int32_t ctx = 0;
};

// Runs one step: each sequence appends its `new_tokens`; returns logits of every new token,
// [sum of new tokens, vocab], in batch order.
std::vector<float> Step(CpuModelRunner& r, std::vector<Seq*> seqs,
                        const std::vector<std::vector<int32_t>>& new_tokens) {
  ForwardBatch b;
  b.max_blocks = 0;
  for (auto* s : seqs) b.max_blocks = std::max<int32_t>(b.max_blocks, static_cast<int32_t>(s->blocks.size()));
  b.query_start.push_back(0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq* s = seqs[i];
    for (size_t k = 0; k < new_tokens[i].size(); ++k) {
      b.token_ids.push_back(new_tokens[i][k]);
      b.positions.push_back(s->ctx + static_cast<int32_t>(k));
    }
    s->ctx += static_cast<int32_t>(new_tokens[i].size());
    b.context_lens.push_back(s->ctx);
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    for (int32_t j = 0; j < b.max_blocks; ++j)
      b.block_tables.push_back(j < static_cast<int32_t>(s->blocks.size()) ? s->blocks[j] : -1);
  }
  for (int32_t t = 0; t < b.num_tokens(); ++t) b.logits_indices.push_back(t);
  ForwardOutput out;
  Status st = r.Forward(b, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out.logits;
}

int32_t Argmax(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double(x)));
  return m;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

class Golden : public ::testing::TestWithParam<const char*> {};

// Per-position logits of the prompt (one prefill chunk) vs transformers fp32.
TEST_P(Golden, PromptLogitsMatchTransformers) {
  const std::string name = GetParam();
  json g = LoadGolden(name);
  auto r = MakeRunner(name);
  ASSERT_NE(r, nullptr);
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<float> want;
  for (const auto& row : g["prompt_logits"])
    for (const auto& x : row) want.push_back(x.get<float>());
  Seq s{{7, 2, 9}, 0};
  auto got = Step(*r, {&s}, {prompt});
  const double err = MaxAbsDiff(got, want), ref = MaxAbs(want);
  std::printf("[golden] %s: prompt %zu tokens, max|logit| %.4f, max abs err %.3e (%.2e x max|logit|)\n",
              name.c_str(), prompt.size(), ref, err, err / ref);
  EXPECT_LE(err, 1e-3 * ref) << name;
}

// Greedy continuation: prefill, then one decode token a step through the paged cache.
TEST_P(Golden, GreedyMatchesTransformers) {
  const std::string name = GetParam();
  json g = LoadGolden(name);
  auto r = MakeRunner(name);
  ASSERT_NE(r, nullptr);
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto want = g["greedy_ids"].get<std::vector<int32_t>>();
  const auto margins = g["greedy_margins"].get<std::vector<double>>();
  const int64_t V = r->config().vocab_size;
  Seq s{{4, 0, 11}, 0};
  auto logits = Step(*r, {&s}, {prompt});
  std::vector<int32_t> got;
  got.push_back(Argmax(logits.data() + (prompt.size() - 1) * V, V));
  while (got.size() < want.size()) {
    logits = Step(*r, {&s}, {{got.back()}});
    got.push_back(Argmax(logits.data(), V));
  }
  size_t same = 0;
  while (same < want.size() && got[same] == want[same]) ++same;
  std::printf("[golden] %s: greedy %zu/%zu tokens equal\n", name.c_str(), same, want.size());
  if (same < want.size()) {
    std::printf("[golden] %s: diverges at %zu (golden top-2 margin %.3e)\n", name.c_str(), same, margins[same]);
    EXPECT_LT(margins[same], 1e-3) << name << ": divergence where transformers' choice is clear";
    EXPECT_GE(same, 12u) << name;
  }
}

// Teacher-forced decode over golden's greedy ids (one token a step through the paged cache,
// absorbed MLA): each step's logits vs transformers' logits of that step, where the golden
// has them (greedy_logits: fixtures made since v3_mla512_tiny).
TEST_P(Golden, DecodeStepLogitsMatchTransformers) {
  const std::string name = GetParam();
  json g = LoadGolden(name);
  if (!g.contains("greedy_logits")) GTEST_SKIP() << name << ": golden has no greedy_logits";
  auto r = MakeRunner(name);
  ASSERT_NE(r, nullptr);
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto ids = g["greedy_ids"].get<std::vector<int32_t>>();
  const int64_t V = r->config().vocab_size;
  Seq s{{4, 0, 11}, 0};
  auto logits = Step(*r, {&s}, {prompt});
  std::vector<float> got(logits.end() - V, logits.end()), want;
  for (size_t i = 1; i < ids.size(); ++i) {
    auto l = Step(*r, {&s}, {{ids[i - 1]}});
    got.insert(got.end(), l.begin(), l.end());
  }
  for (const auto& row : g["greedy_logits"])
    for (const auto& x : row) want.push_back(x.get<float>());
  const double err = MaxAbsDiff(got, want), ref = MaxAbs(want);
  std::printf("[golden] %s: %zu decode steps, max abs err %.3e (%.2e x max|logit|)\n", name.c_str(), ids.size(), err,
              err / ref);
  EXPECT_LE(err, 1e-3 * ref) << name;
}

// Naive vs absorbed MLA: prefill of prompt + continuation in each forced form, then decode
// steps in each form; logits agree to 1e-4 relative.
TEST_P(Golden, NaiveAndAbsorbedMlaAgree) {
  const std::string name = GetParam();
  json g = LoadGolden(name);
  auto r = MakeRunner(name);
  ASSERT_NE(r, nullptr);
  auto tokens = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto cont = g["greedy_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> head(tokens.begin(), tokens.end() - 4), tail(tokens.end() - 4, tokens.end());
  tail.insert(tail.end(), cont.begin(), cont.begin() + 4);
  std::vector<float> logits[2];
  const MlaMode modes[2] = {MlaMode::kNaive, MlaMode::kAbsorbed};
  for (int m = 0; m < 2; ++m) {
    r->set_mla_mode(modes[m]);
    Seq s{{1, 6, 3}, 0};
    logits[m] = Step(*r, {&s}, {head});                      // multi-token prefill
    for (int32_t t : tail) {                                 // single-token decode steps
      auto l = Step(*r, {&s}, {{t}});
      logits[m].insert(logits[m].end(), l.begin(), l.end());
    }
  }
  const double rel = MaxAbsDiff(logits[0], logits[1]) / MaxAbs(logits[0]);
  std::printf("[golden] %s: naive vs absorbed max rel diff %.3e\n", name.c_str(), rel);
  EXPECT_LE(rel, 1e-4) << name;
}

// Chunked prefill through the cache (chunks of 5, 1, 7, rest; auto mode: a 1-token chunk takes
// the absorbed path) == one chunk.
TEST_P(Golden, ChunkedPrefillMatchesOneChunk) {
  const std::string name = GetParam();
  json g = LoadGolden(name);
  auto r = MakeRunner(name);
  ASSERT_NE(r, nullptr);
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  Seq one{{0, 1, 2}, 0};
  auto ref = Step(*r, {&one}, {prompt});
  Seq s{{10, 5, 8}, 0};
  std::vector<float> got;
  size_t pos = 0;
  for (size_t len : {size_t(5), size_t(1), size_t(7), prompt.size()}) {
    const size_t n = std::min(len, prompt.size() - pos);
    if (n == 0) break;
    auto l = Step(*r, {&s}, {std::vector<int32_t>(prompt.begin() + pos, prompt.begin() + pos + n)});
    got.insert(got.end(), l.begin(), l.end());
    pos += n;
  }
  const double rel = MaxAbsDiff(got, ref) / MaxAbs(ref);
  std::printf("[golden] %s: chunked vs one-chunk prefill max rel diff %.3e\n", name.c_str(), rel);
  EXPECT_LE(rel, 1e-4) << name;
}

// A mixed batch (one sequence decoding, another prefilling) == each run alone.
TEST_P(Golden, MixedBatchMatchesSeparateRuns) {
  const std::string name = GetParam();
  json g = LoadGolden(name);
  auto r = MakeRunner(name);
  ASSERT_NE(r, nullptr);
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> other(prompt.rbegin(), prompt.rend());
  other.resize(std::min<size_t>(other.size(), 9));
  // Alone.
  Seq a{{0, 1, 2}, 0}, b{{3, 4}, 0};
  Step(*r, {&a}, {std::vector<int32_t>(prompt.begin(), prompt.end() - 1)});
  auto la = Step(*r, {&a}, {{prompt.back()}});
  auto lb = Step(*r, {&b}, {other});
  // Together: a re-prefills into fresh blocks, then decodes in the same step as b's prefill.
  Seq a2{{5, 6, 7}, 0}, b2{{8, 9}, 0};
  Step(*r, {&a2}, {std::vector<int32_t>(prompt.begin(), prompt.end() - 1)});
  auto lab = Step(*r, {&a2, &b2}, {{prompt.back()}, other});
  std::vector<float> sep = la;
  sep.insert(sep.end(), lb.begin(), lb.end());
  const double rel = MaxAbsDiff(lab, sep) / MaxAbs(sep);
  EXPECT_LE(rel, 1e-5) << name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::ValuesIn(kFixtures));

TEST(CpuRunner, RejectsBadBatch) {
  auto r = MakeRunner("v3_tiny");
  ASSERT_NE(r, nullptr);
  ForwardBatch b;
  b.token_ids = {5, 100000};
  b.positions = {0, 1};
  b.query_start = {0, 2};
  b.context_lens = {2};
  b.block_tables = {0};
  b.max_blocks = 1;
  ForwardOutput out;
  Status st = r->Forward(b, &out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("vocabulary"), std::string::npos) << st.ToString();
  b.token_ids = {5, 6};
  b.block_tables = {99};
  EXPECT_FALSE(r->Forward(b, &out).ok());
}

TEST(CpuRunner, MissingTensorIsNamed) {
  auto r = CpuModelRunner::Create(std::string(DS_TEST_DATA_DIR) + "/does_not_exist", {});
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace ds
