// Shared by the CUDA runner tests: where the fixtures and the carried DeepSeek-V3 config live,
// the runner options of a DeepSeek-V3-config model with dummy weights, prefill / decode
// batches, and the bit-for-bit comparison of two runners (the opt-in decode fusions' tests:
// Diff, RunBoth, RunFusionSchedule).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"

namespace ds::cuda::test {

// DS_TEST_DATA_DIR from the environment (the GPU machine's carried data), else the build's.
inline std::string DataDir() {
  const char* e = std::getenv("DS_TEST_DATA_DIR");
  return e ? e : DS_TEST_DATA_DIR;
}

// The config directory `name` (deepseek-v3, deepseek-v2-lite): the carried test data, else the
// shared models folder; "" when neither has it.
inline std::string ConfigDir(const std::string& name) {
  for (const std::string& d : {DataDir() + "/" + name, std::string(DS_SHARED_DIR) + "/models/" + name})
    if (std::filesystem::exists(d + "/config.json")) return d;
  return "";
}

// The config in `dir`, dummy weights from `seed`, its first `layers` layers; every other
// option at its default (num_kv_blocks 0: the runner sizes the pool).
inline CudaRunnerOptions DummyOptions(const std::string& dir, int layers, uint64_t seed) {
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.load_format = "dummy";
  o.num_layers = layers;
  o.seed = seed;
  return o;
}

// DeepSeek-V3's config (DataDir()/deepseek-v3) through DummyOptions, with a KV pool of
// `kv_blocks` blocks.
inline CudaRunnerOptions DummyV3Options(int layers, int kv_blocks, uint64_t seed) {
  CudaRunnerOptions o = DummyOptions(DataDir() + "/deepseek-v3", layers, seed);
  o.num_kv_blocks = kv_blocks;
  return o;
}

// A prefill of sequences first .. ctx.size() - 1: sequence s has tokens token(s, 0 .. ctx[s] - 1)
// and owns block-table row s (blocks s * max_blocks ..); with `last_logits`, the logits of each
// sequence's last token.
template <class TokenFn>
ForwardBatch PrefillBatch(const std::vector<int>& ctx, int max_blocks, TokenFn token, bool last_logits = true,
                          int first = 0) {
  ForwardBatch b;
  b.max_blocks = max_blocks;
  b.query_start = {0};
  for (int s = first; s < static_cast<int>(ctx.size()); ++s) {
    for (int p = 0; p < ctx[s]; ++p) { b.token_ids.push_back(token(s, p)); b.positions.push_back(p); }
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(ctx[s]);
    if (last_logits) b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
    for (int k = 0; k < max_blocks; ++k) b.block_tables.push_back(s * max_blocks + k);
  }
  return b;
}

// One decode token for each sequence in `seqs`, token(s, ctx[s]) at position ctx[s] (context
// ctx[s] + 1), in the block-table layout of PrefillBatch; the logits of every row, in order.
template <class TokenFn>
ForwardBatch DecodeBatch(const std::vector<int>& seqs, const std::vector<int>& ctx, int max_blocks, TokenFn token) {
  ForwardBatch b;
  b.max_blocks = max_blocks;
  b.query_start = {0};
  for (int s : seqs) {
    b.token_ids.push_back(token(s, ctx[s]));
    b.positions.push_back(ctx[s]);
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(ctx[s] + 1);
    b.logits_indices.push_back(static_cast<int32_t>(b.logits_indices.size()));
    for (int k = 0; k < max_blocks; ++k) b.block_tables.push_back(s * max_blocks + k);
  }
  return b;
}

// Element-wise difference of two runners' logits over the rows compared so far.
struct Diff {
  double max_abs = 0;
  int64_t nonfinite = 0, rows = 0, differ = 0;
  void Add(const ForwardOutput& a, const ForwardOutput& b, int64_t n, int64_t V) {
    for (int64_t r = 0; r < n; ++r, ++rows)
      for (int64_t j = 0; j < V; ++j) {
        const float x = a.logits[r * V + j], y = b.logits[r * V + j];
        nonfinite += !std::isfinite(x) + !std::isfinite(y);
        differ += !(x == y);
        max_abs = std::max(max_abs, std::fabs(double(x) - y));
      }
  }
};

// Per-row comparison of two runners' logits that are not expected to be bit-identical (another
// kernel or summation order): the least cosine and the largest relative L2 over the rows, and
// how many rows are bit-identical.
struct RowDiff {
  int64_t rows = 0, nonfinite = 0, identical_rows = 0;
  double min_cos = 1, max_rel = 0;
  // Rows whose relative L2 exceeds 1e-3, and the row (in Add order) of max_rel: a few far rows
  // among many close ones is the mark of a discrete change (a routing flip) carried through the
  // later layers, not of a uniform precision loss.
  int64_t rows_rel_over_1e3 = 0, worst_row = -1;
  void Add(const float* x, const float* y, int64_t V) {
    double xy = 0, xx = 0, yy = 0, d2 = 0;
    bool same = true;
    for (int64_t j = 0; j < V; ++j) {
      nonfinite += !std::isfinite(x[j]) + !std::isfinite(y[j]);
      same = same && x[j] == y[j];
      xy += double(x[j]) * y[j];
      xx += double(x[j]) * x[j];
      yy += double(y[j]) * y[j];
      d2 += (double(x[j]) - y[j]) * (double(x[j]) - y[j]);
    }
    const double rel = std::sqrt(d2 / (yy + 1e-300));
    if (rel > max_rel) worst_row = rows;
    rows_rel_over_1e3 += rel > 1e-3;
    ++rows;
    identical_rows += same;
    min_cos = std::min(min_cos, xy / std::sqrt(xx * yy + 1e-300));
    max_rel = std::max(max_rel, rel);
  }
  // The first n rows of two outputs' logits ([n, V] each), as Diff::Add takes them.
  void Add(const ForwardOutput& a, const ForwardOutput& b, int64_t n, int64_t V) {
    for (int64_t r = 0; r < n; ++r) Add(a.logits.data() + r * V, b.logits.data() + r * V, V);
  }
};

// Runs one batch through both runners (e.g. [unfused, fused]) and adds their logits'
// difference to d.
template <class D>
void RunBoth(std::array<std::unique_ptr<ModelRunner>, 2>& runners, const ForwardBatch& b, int64_t V, D* d) {
  std::array<ForwardOutput, 2> outs;
  for (int i = 0; i < 2; ++i) {
    auto st = runners[i]->Forward(b, &outs[i]);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  d->Add(outs[0], outs[1], static_cast<int64_t>(b.logits_indices.size()), V);
}

// Two runners from `o` for an on/off comparison: set(options, false) for [0], set(options,
// true) for [1]. Callers check both are non-null (a failed creation is a test failure here).
template <class SetFn>
void MakeRunnerPair(const CudaRunnerOptions& o, SetFn set, std::array<std::unique_ptr<ModelRunner>, 2>* runners) {
  for (int i = 0; i < 2; ++i) {
    CudaRunnerOptions oi = o;
    set(oi, i == 1);
    auto r = CreateCudaModelRunner(oi);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    (*runners)[i] = std::move(r).value();
  }
}

// The decode fusions around the one a test compares on / off (MakeRunnerPair sets that one per
// runner afterwards): their defaults, all ten on, or all off.
enum class Fusions { kDefault, kAll, kNone };
inline const char* FusionsName(Fusions f) {
  return f == Fusions::kDefault ? "default" : f == Fusions::kAll ? "all" : "none";
}
inline void SetFusions(Fusions f, CudaRunnerOptions* o) {
  if (f == Fusions::kDefault) return;
  const bool on = f == Fusions::kAll;
  o->fused_moe_route = o->fused_moe_shared = o->fused_norm = o->fused_qpe = on;
  o->fused_olat = o->fused_silu16 = o->fused_kvrope = o->fused_uv = on;
  o->fused_gate_up_silu = o->persistent_moe = on;
}

// compare(label, options, graphs) for the decode fusions at their defaults and all on, each
// with CUDA graphs off and on (the on / off comparisons of a runner option).
template <class CompareFn>
void ForFusionsAndGraphs(const std::string& label, const CudaRunnerOptions& base, CompareFn compare) {
  for (bool all : {false, true}) {
    CudaRunnerOptions o = base;
    if (all) SetFusions(Fusions::kAll, &o);
    for (bool graphs : {false, true}) compare(label + (all ? " fusions=all" : " fusions=default"), o, graphs);
  }
}

// fn(name, options with model_dir = that fixture) for each of `names` present in DataDir();
// returns how many ran (callers skip when none did).
template <class Fn>
int ForEachFixture(std::initializer_list<const char*> names, Fn fn) {
  int ran = 0;
  for (const char* name : names) {
    const std::string dir = DataDir() + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    CudaRunnerOptions o;
    o.model_dir = dir;
    fn(std::string(name), o);
    ++ran;
  }
  return ran;
}

// The schedule of the decode-fusion comparisons (RunFusionSchedule): kFusionSeqs sequences,
// block-table rows of kFusionMaxBlocks blocks (the runners' KV pools need
// kFusionSeqs * kFusionMaxBlocks blocks).
inline constexpr int kFusionSeqs = 24, kFusionMaxBlocks = 8;

// Runs both runners through the same batches and adds their logits' difference to d (a Diff,
// or a RowDiff where the two are not bit-identical): a
// prefill (sequence 0 alone, 9 tokens: a decode-size pass; then the others, 20-219 tokens, in
// one pass), decode steps of 1..24 sequences (<= 16 tokens: the fusions' sizes; 24: unfused in
// both), a mixed step (sequence 3 with 3 new tokens beside 4 decode rows, 7 tokens) and two
// more decode steps (4 and 1 sequences). With CUDA graphs on, the repeated decode sizes are
// replayed.
template <class D>
void RunFusionSchedule(std::array<std::unique_ptr<ModelRunner>, 2>& runners, D* d) {
  constexpr int kSeqs = kFusionSeqs, kMaxBlocks = kFusionMaxBlocks;
  const int64_t V = runners[0]->config().vocab_size;
  std::vector<int> ctx(kSeqs);
  for (int s = 0; s < kSeqs; ++s) ctx[s] = s == 0 ? 9 : 20 + (s * 37) % 200;
  auto token = [&](int s, int p) { return static_cast<int32_t>((int64_t{s} * 7919 + int64_t{p} * 104729 + 3) % V); };
  auto run = [&](const ForwardBatch& b) { RunBoth(runners, b, V, d); };
  // Prefill: sequence 0 alone (9 tokens: a decode-size pass), then the others in one pass.
  run(PrefillBatch({ctx[0]}, kMaxBlocks, token));
  run(PrefillBatch(ctx, kMaxBlocks, token, true, /*first=*/1));  // the others, in one pass
  auto decode = [&](int n, int step) {
    std::vector<int> seqs;
    for (int i = 0; i < n; ++i) seqs.push_back((step * 5 + i) % kSeqs);
    run(DecodeBatch(seqs, ctx, kMaxBlocks, token));
    for (int s : seqs) ++ctx[s];
  };
  const std::vector<int> sizes = {1, 1, 3, 3, 8, 8, 16, 16, 5, 5, 24, 24, 2, 2};
  for (size_t step = 0; step < sizes.size(); ++step) decode(sizes[step], static_cast<int>(step));
  {
    // Mixed pass (7 tokens): sequence 3 gets 3 new tokens, sequences 10..13 one each.
    ForwardBatch b;
    b.max_blocks = kMaxBlocks;
    b.query_start = {0};
    for (int s : {10, 3, 11, 12, 13}) {
      const int n_new = s == 3 ? 3 : 1;
      for (int i = 0; i < n_new; ++i) {
        b.token_ids.push_back(token(s, ctx[s] + i));
        b.positions.push_back(ctx[s] + i);
      }
      b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.context_lens.push_back(ctx[s] + n_new);
      for (int k = 0; k < kMaxBlocks; ++k) b.block_tables.push_back(s * kMaxBlocks + k);
      b.logits_indices.push_back(b.query_start.back() - 1);
      ctx[s] += n_new;
    }
    run(b);
  }
  decode(4, 20);
  decode(1, 21);
}

// Where a decode fusion runs, pass by pass: `runner` (graphs off, >= 24 KV blocks) takes a
// 9-token prefill of sequence 0 (a decode-size pass), a 69-token prefill of sequences 0-2 (not
// decode-size) and a 3-token decode step; returns how much `count` (a CudaGraphStats counter)
// grew in each of the three passes.
inline std::vector<int64_t> FusedCountsPerPass(ModelRunner& runner,
                                               const std::function<int64_t(const CudaGraphStats&)>& count) {
  const int64_t V = runner.config().vocab_size;
  auto token = [&](int s, int p) { return static_cast<int32_t>((int64_t{s} * 31 + int64_t{p} * 7 + 1) % V); };
  std::vector<int64_t> got;
  auto step = [&](const ForwardBatch& b) {
    const int64_t before = count(GetCudaGraphStats(runner));
    ForwardOutput out;
    auto st = runner.Forward(b, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    got.push_back(count(GetCudaGraphStats(runner)) - before);
  };
  const std::vector<int> ctx = {9, 30, 30};
  step(PrefillBatch({ctx[0]}, 8, token));       // sequence 0, 9 tokens: decode-size
  step(PrefillBatch(ctx, 8, token));            // sequences 0-2 (0 again, same tokens), 69 tokens
  step(DecodeBatch({0, 1, 2}, ctx, 8, token));  // 3 tokens: decode-size
  return got;
}

// The runner pair of an on / off comparison (MakeRunnerPair from `o` with kFusionSeqs x
// kFusionMaxBlocks KV blocks and CUDA graphs on or off) through RunFusionSchedule: the logits'
// difference in *d, the two runners' graph stats in *stats ([0] off, [1] on). False (and a test
// failure) when a runner could not be made.
template <class SetFn>
bool RunOptionPair(const std::string& label, CudaRunnerOptions o, bool graphs, SetFn set, RowDiff* d,
                   std::array<CudaGraphStats, 2>* stats) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: off, 1: on
  MakeRunnerPair(o, set, &runners);
  if (!runners[0] || !runners[1]) {
    ADD_FAILURE() << label << ": runner creation failed";
    return false;
  }
  RunFusionSchedule(runners, d);
  for (int i = 0; i < 2; ++i) (*stats)[i] = GetCudaGraphStats(*runners[i]);
  return true;
}

// The on / off comparison of one runner option that must not change any bit (a fusion computing
// the same values in the same order, or scheduling only): a runner pair from `o` with CUDA graphs
// on or off that differs only in what set(options, on) changes, RunFusionSchedule over both; every
// logit must be bit-identical and finite. Prints one "[fixture] <label> <option> graphs=<0|1>: ..."
// line and EXPECTs both; returns the two runners' graph stats ([0] off, [1] on) for the caller's
// checks that the option's path ran.
template <class SetFn>
std::array<CudaGraphStats, 2> CompareOptionBitIdentical(const std::string& label, const char* option,
                                                        CudaRunnerOptions o, bool graphs, SetFn set) {
  std::array<CudaGraphStats, 2> stats{};
  RowDiff d;
  if (!RunOptionPair(label, o, graphs, set, &d, &stats)) return stats;
  const bool pass = d.identical_rows == d.rows && d.nonfinite == 0;
  std::printf("[fixture] %s %s graphs=%d: rows=%lld identical_rows=%lld nonfinite=%lld replayed=%lld%s\n", label.c_str(),
              option, graphs ? 1 : 0, (long long)d.rows, (long long)d.identical_rows, (long long)d.nonfinite,
              (long long)stats[1].replayed, pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.identical_rows, d.rows) << label << ": " << option << " must not change any bit";
  EXPECT_EQ(d.nonfinite, 0) << label;
  return stats;
}

// Whether an option's path must run in the on runner of a comparison, may, or must not.
enum class PathExpect { kRuns, kAny, kNever };

// CompareOptionBitIdentical with CUDA graphs off and on, and the option's path counter `ran` (a
// CudaGraphStats member): zero in the off runner; in the on runner > 0 (kRuns), anything (kAny)
// or zero (kNever: the option must not apply to this model).
template <class SetFn>
void CompareOptionBitIdenticalRan(const std::string& label, const char* option, const CudaRunnerOptions& o, SetFn set,
                                  int64_t CudaGraphStats::*ran, PathExpect expect) {
  for (bool graphs : {false, true}) {
    const auto stats = CompareOptionBitIdentical(label, option, o, graphs, set);
    std::printf("[fixture] %s %s graphs=%d: path ran %lld times (off runner %lld)\n", label.c_str(), option,
                graphs ? 1 : 0, (long long)(stats[1].*ran), (long long)(stats[0].*ran));
    EXPECT_EQ(stats[0].*ran, 0) << label;
    if (expect == PathExpect::kRuns) { EXPECT_GT(stats[1].*ran, 0) << label << ": " << option << " did not run"; }
    if (expect == PathExpect::kNever) { EXPECT_EQ(stats[1].*ran, 0) << label << ": " << option << " ran"; }
  }
}

// Per-row bounds of an fp32-order change: cosine >= min_cos, relative L2 <= max_rel.
struct RowBounds {
  double min_cos = 0.9999, max_rel = 1e-2;
};
// The W8A8 numerics (fp8_gemm "cublas") re-quantise every projection's activations to e4m3
// (3 mantissa bits), so an fp32-order difference that moves an activation across a rounding
// boundary changes it by a whole e4m3 step, and that grows layer after layer. Measured in session
// 15 (run 13) on dummy V3, 3 layers: fused_q_absorb, one fp32-order change, moves the logits to
// min cosine 0.9975 and max relative L2 0.070 in W8A8, against 0.99998 / 5.9e-3 in the default
// numerics. The W8A8 comparisons bound at min cosine 0.99 and relative L2 0.2: they catch gross
// defects (a badly wrong GEMM, non-finite values, a path that does not run), not subtle ones. The
// op tests hold the kernels themselves to 1e-3.
inline constexpr RowBounds kW8A8Bounds{0.99, 0.2};

// The on / off comparison of one runner option that changes an fp32 summation order (not the
// bits of every row): a runner pair from `o` with CUDA graphs on or off that differs only in what
// set(options, on) changes (MakeRunnerPair), RunFusionSchedule over both. Per row: cosine >=
// 0.9999, relative L2 <= 1e-2 by default (a wrong row, column or expert would be far outside;
// `bounds` otherwise, e.g. kW8A8Bounds), no non-finite logits; with expect_change some row must
// differ (the option's path ran). Prints one "[fixture] <label> <option> graphs=<0|1>: ..." line
// and EXPECTs each bound; returns the two runners' graph stats ([0] off, [1] on) for the
// caller's own checks of its path.
template <class SetFn>
std::array<CudaGraphStats, 2> CompareOptionWithinBounds(const std::string& label, const char* option, CudaRunnerOptions o,
                                                        bool graphs, bool expect_change, SetFn set,
                                                        RowBounds bounds = {}) {
  std::array<CudaGraphStats, 2> stats{};
  RowDiff d;
  if (!RunOptionPair(label, o, graphs, set, &d, &stats)) return stats;
  const bool changed_ok = !expect_change || d.identical_rows < d.rows;
  const bool pass = d.nonfinite == 0 && d.min_cos >= bounds.min_cos && d.max_rel <= bounds.max_rel && changed_ok;
  std::printf("[fixture] %s %s graphs=%d: rows=%lld min_cos=%.7f max_rel_l2=%.3e identical_rows=%lld%s nonfinite=%lld%s\n",
              label.c_str(), option, graphs ? 1 : 0, (long long)d.rows, d.min_cos, d.max_rel, (long long)d.identical_rows,
              d.identical_rows == d.rows ? " (bit-identical)" : "", (long long)d.nonfinite, pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_GE(d.min_cos, bounds.min_cos) << label;
  EXPECT_LE(d.max_rel, bounds.max_rel) << label;
  if (expect_change) { EXPECT_LT(d.identical_rows, d.rows) << label << ": " << option << " made no difference (did it run?)"; }
  return stats;
}

// CompareOptionWithinBounds with CUDA graphs off and on, and the option's path counter `ran` (a
// CudaGraphStats member) checked as CompareOptionBitIdenticalRan checks it.
template <class SetFn>
void CompareOptionWithinBoundsRan(const std::string& label, const char* option, const CudaRunnerOptions& o,
                                  bool expect_change, SetFn set, int64_t CudaGraphStats::*ran, PathExpect expect,
                                  RowBounds bounds = {}) {
  for (bool graphs : {false, true}) {
    const auto stats = CompareOptionWithinBounds(label, option, o, graphs, expect_change, set, bounds);
    std::printf("[fixture] %s %s graphs=%d: path ran %lld times (off runner %lld)\n", label.c_str(), option,
                graphs ? 1 : 0, (long long)(stats[1].*ran), (long long)(stats[0].*ran));
    EXPECT_EQ(stats[0].*ran, 0) << label;
    if (expect == PathExpect::kRuns) { EXPECT_GT(stats[1].*ran, 0) << label << ": " << option << " did not run"; }
    if (expect == PathExpect::kNever) { EXPECT_EQ(stats[1].*ran, 0) << label << ": " << option << " ran"; }
  }
}

}  // namespace ds::cuda::test
