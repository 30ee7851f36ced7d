// CUDA model runner on the tiny transformers fixtures (tests/data/*), in both numerics modes
// (production: bf16 GEMM inputs; precise: split hi/lo bf16 activations): every prompt
// position's logits vs golden (cosine >= 0.999; FP8 fixture >= kFp8MinCosine, see below), a
// chunked prefill (two chunks through the paged cache) vs golden, and teacher-forced greedy
// decode (absorbed MLA over the paged cache) vs golden's greedy ids and the CPU runner's argmax
// wherever golden's top-2 margin > 0.05. The id checks are asserted in precise mode; in
// production mode they are measured and printed: bf16 activations move logits by up to ~0.1
// on these fixtures (max_abs_diff), the size of the 0.05 margin, and an MoE routing near-tie
// can flip an expert, so an occasional low-margin id can differ there. Where the golden has
// the logits of each greedy step (v3_mla512_tiny: V3's MLA dims, so its decode steps run the
// tensor-core MLA decode, the default), the decode steps' logits are bounded like the prompt's.
//
// FP8 tolerance: the FP8 fixture's golden is fp32 math on the dequantised weights. The default
// FP8 path dequantises weights in the kernel (bf16 rounding of each weight, bf16 activations)
// and meets the bf16 bound (measured >= 0.9998). The DeepSeek activation-quantised cuBLASLt
// path costs ~2.6% relative error per GEMM output (test_gemm.cpp gemm_fp8_vs_unquantised_x),
// and this tiny random fixture amplifies it: a CPU emulation of exactly that path
// (scripts/fp8_act_quant_experiment.py: e4m3 1x128 activation quantisation on the inputs of the
// projections the runner sends to cuBLASLt, bf16 on the others) gives min cosine 0.806 / mean
// 0.975 vs the fp32 golden, and the emulation perturbed by 1e-4..1e-3 relative noise per GEMM
// output (the size of Hopper's FP8 accumulation error) moves single positions to cosine 0.79
// vs itself (activation-quantisation boundaries and MoE routing flips). So the cuBLASLt path
// is bounded (Fp8FixtureThroughCublasLt) by (a) at least 8 of 16 positions within cosine 0.99
// of the emulation's logits (tests/data/v3_fp8_tiny/fp8_act_reference.json; emulations
// perturbed by 1e-4 / 3e-4 / 1e-3 / 3e-3 / 1e-2 keep 15 / 14 / 13 / 9 / 10), and (b) vs golden: mean cosine >= 0.95 and min >= 0.70 (emulation:
// mean 0.9746-0.9764, min 0.794-0.806). A layout/scale bug moves every position.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/ops.h"
#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/grouped_gemm_sm90_mixed.h"
#include "backend/cuda/mla_decode.h"
#include "runtime/cpu_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kMinCosine = 0.999;
constexpr double kFp8MinCosine = 0.99;
constexpr double kMarginForIds = 0.05;

double Cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) { ab += double(a[i]) * b[i]; aa += double(a[i]) * a[i]; bb += double(b[i]) * b[i]; }
  return ab / std::sqrt(aa * bb + 1e-300);
}
int32_t ArgMax(const float* a, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i) if (a[i] > a[b]) b = i;
  return static_cast<int32_t>(b);
}

// One sequence on blocks 0..nb-1: `ids` new tokens after `ctx0` cached ones.
ForwardBatch Batch(const std::vector<int32_t>& ids, int32_t ctx0, int nb, bool all_logits) {
  ForwardBatch b;
  b.token_ids = ids;
  for (size_t i = 0; i < ids.size(); ++i) b.positions.push_back(ctx0 + static_cast<int32_t>(i));
  b.query_start = {0, static_cast<int32_t>(ids.size())};
  b.context_lens = {ctx0 + static_cast<int32_t>(ids.size())};
  b.max_blocks = nb;
  for (int i = 0; i < nb; ++i) b.block_tables.push_back(i);
  if (all_logits) for (size_t i = 0; i < ids.size(); ++i) b.logits_indices.push_back(static_cast<int32_t>(i));
  else b.logits_indices = {static_cast<int32_t>(ids.size()) - 1};
  return b;
}

// tweak (optional) changes the runner options before the runner is made; assert_decode asserts
// the decode steps in bf16 mode too; after (optional) inspects the runner at the end (an
// option's golden check, e.g. FixturesMatchGoldenQAbsorb: the path must have run).
void CheckFixture(const std::string& name, bool precise, const std::function<void(CudaRunnerOptions&)>& tweak = {},
                  bool assert_decode = false, const std::function<void(ModelRunner&)>& after = {}) {
  const char* mode = precise ? "precise" : "bf16";
  const std::string dir = DataDir() + "/" + name;
  std::ifstream in(dir + "/golden.json");
  ASSERT_TRUE(in.good()) << dir;
  const nlohmann::json g = nlohmann::json::parse(in);
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto golden_logits = g["prompt_logits"].get<std::vector<std::vector<float>>>();
  const auto greedy = g["greedy_ids"].get<std::vector<int32_t>>();
  const auto greedy_margin = g["greedy_margins"].get<std::vector<double>>();
  const int P = static_cast<int>(prompt.size());
  const int nb = (P + static_cast<int>(greedy.size()) + 1 + 63) / 64 + 1;
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.num_kv_blocks = nb;
  o.precise_activations = precise;
  if (tweak) tweak(o);
  auto r = CreateCudaModelRunner(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ModelRunner& cuda = **r;
  const int64_t V = cuda.config().vocab_size;
  const bool fp8 = cuda.config().quant.fp8;
  const double min_cos_bound = fp8 ? kFp8MinCosine : kMinCosine;

  // 1. Whole-prompt prefill: every position vs golden.
  ForwardOutput out;
  ASSERT_TRUE(cuda.Forward(Batch(prompt, 0, nb, true), &out).ok());
  double min_cos = 1, max_abs = 0;
  int64_t nonfinite = 0;
  for (int i = 0; i < P; ++i) {
    const float* got = out.logits.data() + i * V;
    for (int64_t j = 0; j < V; ++j) {
      nonfinite += !std::isfinite(got[j]);
      max_abs = std::max(max_abs, std::fabs(double(got[j]) - golden_logits[i][j]));
    }
    min_cos = std::min(min_cos, Cosine(got, golden_logits[i].data(), V));
  }
  std::printf("[fixture] %s %s prefill: positions=%d min_cosine=%.6f max_abs_diff=%.4e nonfinite=%lld bound=%.3f%s\n",
              name.c_str(), mode, P, min_cos, max_abs, (long long)nonfinite, min_cos_bound, min_cos >= min_cos_bound ? " PASS" : " FAIL");
  EXPECT_EQ(nonfinite, 0);
  EXPECT_GE(min_cos, min_cos_bound) << name;
  const int32_t first = ArgMax(out.logits.data() + int64_t(P - 1) * V, V);
  // Golden logits of each greedy step (every fixture's golden has them): the decode steps'
  // logits are bounded like the prompt's.
  std::vector<std::vector<float>> step_logits;
  if (g.contains("greedy_logits")) step_logits = g["greedy_logits"].get<std::vector<std::vector<float>>>();
  double min_cos_steps = 1;
  if (!step_logits.empty()) min_cos_steps = Cosine(out.logits.data() + int64_t(P - 1) * V, step_logits[0].data(), V);

  // 2. Teacher-forced greedy decode over golden's greedy ids, CUDA vs golden and vs CPU.
  CpuRunnerOptions co;
  co.num_kv_blocks = nb;
  auto cpu_or = CpuModelRunner::Create(dir, co);
  ASSERT_TRUE(cpu_or.ok()) << cpu_or.status().ToString();
  auto& cpu = **cpu_or;
  ForwardOutput cout_;
  ASSERT_TRUE(cpu.Forward(Batch(prompt, 0, nb, false), &cout_).ok());
  int checked = 0, mismatch_golden = 0, mismatch_cpu = 0;
  double min_cos_cpu = 1;
  auto check_step = [&](size_t i, int32_t cuda_id, int32_t cpu_id) {
    if (greedy_margin[i] > kMarginForIds) {
      ++checked;
      mismatch_golden += cuda_id != greedy[i];
      mismatch_cpu += cuda_id != cpu_id;
      if (cuda_id != greedy[i] || cuda_id != cpu_id)
        std::printf("  %s step %zu: cuda %d cpu %d golden %d (margin %.3f)\n", name.c_str(), i, cuda_id, cpu_id, greedy[i],
                    greedy_margin[i]);
    }
  };
  check_step(0, first, ArgMax(cout_.logits.data(), V));
  for (size_t i = 1; i < greedy.size(); ++i) {
    const int32_t ctx0 = P + static_cast<int32_t>(i) - 1;
    ASSERT_TRUE(cuda.Forward(Batch({greedy[i - 1]}, ctx0, nb, false), &out).ok());
    ASSERT_TRUE(cpu.Forward(Batch({greedy[i - 1]}, ctx0, nb, false), &cout_).ok());
    min_cos_cpu = std::min(min_cos_cpu, Cosine(out.logits.data(), cout_.logits.data(), V));
    if (i < step_logits.size()) min_cos_steps = std::min(min_cos_steps, Cosine(out.logits.data(), step_logits[i].data(), V));
    check_step(i, ArgMax(out.logits.data(), V), ArgMax(cout_.logits.data(), V));
  }
  std::printf("[fixture] %s %s decode: steps=%zu checked(margin>%.2f)=%d mismatches_vs_golden=%d mismatches_vs_cpu=%d "
              "min_cosine_vs_cpu=%.6f%s\n",
              name.c_str(), mode, greedy.size(), kMarginForIds, checked, mismatch_golden, mismatch_cpu, min_cos_cpu,
              (mismatch_golden == 0 && mismatch_cpu == 0) ? " PASS" : " FAIL");
  if (!step_logits.empty()) {
    std::printf("[fixture] %s %s decode: min_cosine_vs_golden_step_logits=%.6f bound=%.3f%s\n", name.c_str(), mode,
                min_cos_steps, min_cos_bound, min_cos_steps >= min_cos_bound ? " PASS" : " FAIL");
  }
  // Asserted in precise mode; in bf16 mode measured and printed, like the ids: an MoE routing
  // near-tie flipped by bf16 activations (v3_tiny's step 14, CUDA_RUNS.md run 5) moves that
  // step's logits well past the bound.
  if ((precise || assert_decode) && !step_logits.empty()) {
    EXPECT_GE(min_cos_steps, min_cos_bound) << name;
  }
  if (precise || assert_decode) {
    EXPECT_EQ(mismatch_golden, 0) << name;
    EXPECT_EQ(mismatch_cpu, 0) << name;
    EXPECT_GE(min_cos_cpu, min_cos_bound) << name;
  }

  // 3. Chunked prefill: the prompt in two chunks through the cache (fresh runner).
  auto r2 = CreateCudaModelRunner(o);
  ASSERT_TRUE(r2.ok());
  const int half = P / 2;
  std::vector<int32_t> a(prompt.begin(), prompt.begin() + half), b(prompt.begin() + half, prompt.end());
  ASSERT_TRUE((*r2)->Forward(Batch(a, 0, nb, true), &out).ok());
  double min_cos_chunk = 1;
  for (int i = 0; i < half; ++i) min_cos_chunk = std::min(min_cos_chunk, Cosine(out.logits.data() + i * V, golden_logits[i].data(), V));
  ASSERT_TRUE((*r2)->Forward(Batch(b, half, nb, true), &out).ok());
  for (int i = half; i < P; ++i)
    min_cos_chunk = std::min(min_cos_chunk, Cosine(out.logits.data() + (i - half) * V, golden_logits[i].data(), V));
  std::printf("[fixture] %s %s chunked_prefill(%d+%d): min_cosine=%.6f%s\n", name.c_str(), mode, half, P - half, min_cos_chunk,
              min_cos_chunk >= min_cos_bound ? " PASS" : " FAIL");
  EXPECT_GE(min_cos_chunk, min_cos_bound) << name;
  if (after) after(cuda);
}

// The FP8 fixture with cuBLASLt's activation-quantised FP8 GEMM forced for every projection
// (the path real V3 shapes take): vs the CPU emulation of that path and vs golden (bounds in
// the header comment).
TEST(CudaRunner, Fp8FixtureThroughCublasLt) {
  const std::string dir = DataDir() + "/v3_fp8_tiny";
  if (!std::filesystem::exists(dir + "/golden.json") || !std::filesystem::exists(dir + "/fp8_act_reference.json"))
    GTEST_SKIP();
  std::ifstream in(dir + "/golden.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  std::ifstream in2(dir + "/fp8_act_reference.json");
  const nlohmann::json e = nlohmann::json::parse(in2);
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(prompt, e["prompt_ids"].get<std::vector<int32_t>>());
  const auto golden_logits = g["prompt_logits"].get<std::vector<std::vector<float>>>();
  const auto emu_logits = e["prompt_logits"].get<std::vector<std::vector<float>>>();
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.num_kv_blocks = 4;
  o.fp8_gemm = "cublas-all";
  auto r = CreateCudaModelRunner(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int64_t V = (*r)->config().vocab_size;
  ForwardOutput out;
  ASSERT_TRUE((*r)->Forward(Batch(prompt, 0, 4, true), &out).ok());
  double min_cos = 1, sum_cos = 0;
  int close_to_emu = 0;
  std::string per_pos;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const double c = Cosine(out.logits.data() + i * V, golden_logits[i].data(), V);
    const double ce = Cosine(out.logits.data() + i * V, emu_logits[i].data(), V);
    min_cos = std::min(min_cos, c);
    sum_cos += c;
    close_to_emu += ce >= 0.99;
    char buf[48];
    std::snprintf(buf, sizeof buf, " %.4f/%.4f", c, ce);
    per_pos += buf;
  }
  const double mean_cos = sum_cos / prompt.size();
  const bool ok = close_to_emu >= 8 && mean_cos >= 0.95 && min_cos >= 0.70;
  std::printf("[fixture] v3_fp8_tiny cublaslt_fp8 prefill: vs_golden min_cosine=%.6f mean_cosine=%.6f "
              "positions_within_0.99_of_emulation=%d/%zu%s\n[fixture]   per position cos vs golden/emulation:%s\n",
              min_cos, mean_cos, close_to_emu, prompt.size(), ok ? " PASS" : " FAIL", per_pos.c_str());
  EXPECT_GE(close_to_emu, 8);
  EXPECT_GE(mean_cos, 0.95);
  EXPECT_GE(min_cos, 0.70);
}

TEST(CudaRunner, FixturesMatchGolden) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(DataDir()))
    if (std::filesystem::exists(e.path() / "golden.json")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_FALSE(names.empty()) << "no fixtures under " << DataDir();
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    CheckFixture(n, false);
    CheckFixture(n, true);
  }
}

// fused_q_absorb (mla_q_absorb.h) against transformers' goldens, with the fixtures whose MLA
// dims it takes (nope a multiple of 32: v3_mla512_tiny's 128 / 512, v3_fp8_tiny's 32 / 64). The
// path runs in the one-token decode steps (the prefills are naive MLA), so those are asserted
// here in bf16 mode (ids vs golden and CPU, step logits' cosine); the path must have run.
TEST(CudaRunner, FixturesMatchGoldenQAbsorb) {
  for (const char* n : {"v3_mla512_tiny", "v3_fp8_tiny"}) {
    if (!std::filesystem::exists(DataDir() + "/" + n + "/golden.json")) continue;
    SCOPED_TRACE(n);
    CheckFixture(
        n, false, [](CudaRunnerOptions& o) { o.fused_q_absorb = true; }, /*assert_decode=*/true,
        [&](ModelRunner& r) {
          const int64_t ran = GetCudaGraphStats(r).q_absorb_layers;
          std::printf("[fixture] %s fused_q_absorb golden: path ran %lld times (expected > 0)\n", n, (long long)ran);
          EXPECT_GT(ran, 0) << n << ": fused_q_absorb never ran";
        });
  }
}

// A real-width smoke test: DeepSeek-V3's config, dummy FP8 weights, 4 layers (3 dense + 1 MoE),
// a mixed batch (two prefill chunks and two decode tokens) through one Forward: finite logits.
TEST(CudaRunner, DummyV3MixedBatchIsFinite) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  CudaRunnerOptions o = DummyV3Options(4, 64, 7);
  auto r = CreateCudaModelRunner(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ModelRunner& m = **r;
  const int64_t V = m.config().vocab_size;
  // seq0: 300-token prompt; seq1: 70 tokens; then seq0 + seq1 decode one token each with
  // seq2 (a 5-token prefill) in the same batch.
  ForwardBatch b;
  b.max_blocks = 8;
  auto add_seq = [&](int n_new, int ctx0, int first_block) {
    for (int i = 0; i < n_new; ++i) { b.token_ids.push_back((ctx0 + i * 7919) % V); b.positions.push_back(ctx0 + i); }
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(ctx0 + n_new);
    for (int k = 0; k < 8; ++k) b.block_tables.push_back(first_block + k);
    b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
  };
  b.query_start = {0};
  add_seq(300, 0, 0);
  add_seq(70, 0, 8);
  ForwardOutput out;
  ASSERT_TRUE(m.Forward(b, &out).ok());
  b = ForwardBatch();
  b.max_blocks = 8;
  b.query_start = {0};
  add_seq(1, 300, 0);
  add_seq(5, 0, 16);
  add_seq(1, 70, 8);
  auto st = m.Forward(b, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  int64_t bad = 0;
  for (float v : out.logits) bad += !std::isfinite(v);
  std::printf("[fixture] dummy_v3_4layers mixed batch: logits rows=%zu nonfinite=%lld%s\n", out.logits.size() / V,
              (long long)bad, bad == 0 ? " PASS" : " FAIL");
  EXPECT_EQ(bad, 0);
}

// Row-wise comparison of two [R, V] logit sets: min / mean / median cosine, worst relative L2.
struct RowStats {
  std::vector<double> cos;  // per row
  int64_t rows = 0;
  double min_cos = 1, mean_cos = 0, median_cos = 1, max_rel_l2 = 0;
  int below = 0;  // rows with cosine < the threshold given to Compare
};
RowStats Compare(const std::vector<float>& a, const std::vector<float>& b, int64_t V, double threshold) {
  RowStats st;
  EXPECT_EQ(a.size(), b.size());
  st.rows = static_cast<int64_t>(std::min(a.size(), b.size())) / V;
  std::vector<double> cs;
  for (int64_t i = 0; i < st.rows; ++i) {
    const float* x = a.data() + i * V;
    const float* y = b.data() + i * V;
    const double c = Cosine(x, y, V);
    double d2 = 0, y2 = 0;
    for (int64_t j = 0; j < V; ++j) { d2 += (double(x[j]) - y[j]) * (double(x[j]) - y[j]); y2 += double(y[j]) * y[j]; }
    st.max_rel_l2 = std::max(st.max_rel_l2, std::sqrt(d2 / (y2 + 1e-300)));
    cs.push_back(c);
    st.cos.push_back(c);
    st.min_cos = std::min(st.min_cos, c);
    st.mean_cos += c / st.rows;
    st.below += c < threshold;
  }
  if (!cs.empty()) {
    std::sort(cs.begin(), cs.end());
    st.median_cos = cs[cs.size() / 2];
  }
  return st;
}
void PrintStats(const char* label, const RowStats& st, double threshold) {
  std::printf("[fixture] %s: rows=%lld min_cosine=%.7f median=%.7f mean=%.7f max_rel_l2=%.3e rows_below_%g=%d\n", label,
              (long long)st.rows, st.min_cos, st.median_cos, st.mean_cos, st.max_rel_l2, threshold, st.below);
  std::string rows;
  for (double c : st.cos) {
    char buf[24];
    std::snprintf(buf, sizeof buf, " %.6f", c);
    rows += buf;
  }
  std::printf("[fixture]   per row:%s\n", rows.c_str());
}

// Real V3 shapes, dummy FP8 weights, 40 prompt rows, same weights in every run, three FP8
// paths: "cublas" (cuBLASLt block-scaled FP8 GEMM, activations quantised to e4m3 per 1x128
// group by Fp8QuantizePerTokenGroup), "kernel" (in-kernel weight dequantisation, bf16
// activations: the default) and "emulation" (fp8_emulate_act_quant: on exactly the projections
// "cublas" sends to cuBLASLt, the same Fp8QuantizePerTokenGroup, then both operands
// dequantised in fp32 and carried as bf16 hi + lo through three bf16 GEMMs with fp32
// accumulation: the FP8 math of the cuBLASLt path to ~2^-16 relative).
// Per GEMM, cublas and the emulation differ only by accumulation order. Through the model they
// do not stay that close, and no whole-model bound like cosine >= 0.9999 can hold: every
// quantised GEMM input is rounded to e4m3 (steps of 2^-3 relative), and a tiny upstream
// difference moves some of those roundings across a boundary, each a whole e4m3 step, so a
// difference of 1e-6 grows towards the e4m3 noise itself over a few chained quantised GEMMs
// (the mechanism behind the FP8 fixture's perturbed-emulation spread, header comment). Run 6
// (3 dense layers): cublas vs emulation 1 - cos 3.2e-3 - 4.9e-3 on every row, cublas vs kernel
// 5.0e-3 - 1.26e-2. So the test is the comparison the e4m3 noise does allow: the cuBLASLt path
// is closer to the emulation of its own quantisation than to bf16 activations, row by row. A
// correct path sits at the chained-rounding floor, 0.3-0.65x of its distance to bf16
// activations (run 6: max 0.644, mean 0.41); a path that quantised differently (other scales,
// groups or rounding) carries its own, independent e4m3 noise: ~2x the distance of the two
// noises' own sizes from the emulation, ratio >= ~1; a path without activation quantisation:
// ratio >> 1. Bound: (1 - cos(cublas, emulation)) <= 0.75 x (1 - cos(cublas, kernel)) on
// every row (3 layers: V3's dense layers, no routing). 4 layers adds the first MoE layer (256
// experts, top-8), where these differences flip routed experts at near-ties and move single
// rows by more (run 6: one row at ratio 1.02): there the ratio of the mean distances over the
// 40 rows is bounded by 0.75 (run 6: 0.47). The distances are printed as information
// (docs/design/cuda_backend.md, "Numerics").
std::vector<float> DummyV3Fp8Logits(int layers, const std::string& fp8_gemm, bool emulate) {
  CudaRunnerOptions o = DummyV3Options(layers, 8, 11);
  o.fp8_gemm = fp8_gemm;
  o.fp8_emulate_act_quant = emulate;
  o.sm90_mixed_gemm = false;  // "kernel" = the mma.sync kernel these bounds were set on
  auto r = CreateCudaModelRunner(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 104729 + 17) % (*r)->config().vocab_size);
  ForwardOutput out;
  EXPECT_TRUE((*r)->Forward(Batch(ids, 0, 8, true), &out).ok());
  return out.logits;
}

void CheckCublasFp8AgainstEmulation(int layers) {
  constexpr int64_t V = 129280;
  constexpr double kPrint = 0.9999, kMaxRatio = 0.75;  // kPrint: rows_below count only
  const auto cublas = DummyV3Fp8Logits(layers, "cublas", false);
  const auto emu = DummyV3Fp8Logits(layers, "kernel", true);
  const auto kernel = DummyV3Fp8Logits(layers, "kernel", false);
  ASSERT_FALSE(cublas.empty());
  int64_t bad = 0;
  for (float v : cublas) bad += !std::isfinite(v);
  EXPECT_EQ(bad, 0);
  const RowStats ce = Compare(cublas, emu, V, kPrint), ck = Compare(cublas, kernel, V, 0.99),
                 ek = Compare(emu, kernel, V, 0.99);
  char label[128];
  std::snprintf(label, sizeof label, "dummy_v3_%dlayers fp8 cublaslt_vs_actquant_emulation", layers);
  PrintStats(label, ce, kPrint);
  std::snprintf(label, sizeof label, "dummy_v3_%dlayers fp8 cublaslt_vs_bf16_activations (information)", layers);
  PrintStats(label, ck, 0.99);
  std::snprintf(label, sizeof label, "dummy_v3_%dlayers fp8 actquant_emulation_vs_bf16_activations (information)", layers);
  PrintStats(label, ek, 0.99);
  // (1 - cos(cublas, emulation)) / (1 - cos(cublas, bf16 activations)), per row and of the means.
  double max_ratio = 0, sum_ce = 0, sum_ck = 0;
  for (int64_t i = 0; i < ce.rows; ++i) {
    max_ratio = std::max(max_ratio, (1 - ce.cos[i]) / std::max(1e-12, 1 - ck.cos[i]));
    sum_ce += 1 - ce.cos[i];
    sum_ck += 1 - ck.cos[i];
  }
  const double mean_ratio = sum_ce / std::max(1e-12, sum_ck);
  const bool pass = layers <= 3 ? max_ratio <= kMaxRatio : mean_ratio <= kMaxRatio;
  std::printf("[fixture] dummy_v3_%dlayers fp8 distance ratio (1-cos(cublas,emulation))/(1-cos(cublas,bf16act)): "
              "max_per_row=%.3f of_means=%.3f bound=%.2f (%s)%s\n", layers, max_ratio, mean_ratio, kMaxRatio,
              layers <= 3 ? "every row" : "of the means", pass ? " PASS" : " FAIL");
  if (layers <= 3) {
    EXPECT_LE(max_ratio, kMaxRatio);
  } else {
    EXPECT_LE(mean_ratio, kMaxRatio);
  }
}

TEST(CudaRunner, DummyV3DenseCublasFp8CloserToActQuantEmulation) {
  if (!std::filesystem::exists(DataDir() + "/deepseek-v3/config.json")) GTEST_SKIP();
  CheckCublasFp8AgainstEmulation(3);
}

TEST(CudaRunner, DummyV3CublasFp8CloserToActQuantEmulation) {
  if (!std::filesystem::exists(DataDir() + "/deepseek-v3/config.json")) GTEST_SKIP();
  CheckCublasFp8AgainstEmulation(4);
}

// Real V3 shapes, dummy FP8 weights: absorbed-MLA decode (kAbsorbed: the prefill rows take
// the decode kernel too) for a 300-token and a 70-token sequence, 4 decode steps together and
// a 2-token MTP-style step; five decode kernels on the same weights: the CUDA-core kernel
// (fp32 q and probabilities), the tensor-core kernel (bf16 q and P, FlashMLA's numerics), and
// the CUDA-core kernel emulating the tc rounding (emulate_tc_rounding: 1 = bf16 q, 2 = bf16 P,
// 3 = both, each with the tc path's base-2 softmax and split plan).
// The bound: tc vs emulation(3) >= 0.9999 per row. Both round the same q to bf16 and the same
// probabilities (same running maxima, same splits) to bf16; what differs at the op level is
// fp32 summation order (<= 2.6e-5 relative, CudaMlaDecode tests). The model does not carry
// that through linearly: every GEMM input is rounded to bf16, and a tiny upstream difference
// moves a few of those roundings across a boundary, each a whole bf16 step, so any two paths
// that differ at all settle at a floor of ~1e-5 in 1 - cos (run 6: tc vs emulation 1.1e-5 -
// 1.8e-5 on every row, against 6e-5 for cuda-core vs tc): >= 0.9999 keeps that floor 5x
// inside. 3 layers (V3's dense layers): every row. 4 layers adds the first MoE layer (256
// experts, top-8), where any difference of this size can flip a routed expert at a near-tie
// and move that row alone by ~3e-3 - 7e-3 (run 6: 2 of 12 rows between tc and the emulation,
// rows 1 and 4; 1 row between cuda-core and all four bf16 variants, row 11: run 5's 0.9928):
// there the median row and at least 3/4 of the rows are bounded. cuda-core vs tc and the
// single-rounding emulations are printed as information (docs/design/cuda_backend.md,
// "Numerics").
// q_bf16_layers (non-null): CudaRunnerOptions::mla_decode_q_bf16 on, and the runner's count of
// layers that took it (CudaGraphStats::mla_q_bf16_layers) stored there.
// growth: instead of the steps below, two one-token prompts, three decode steps (the batch-2 decode graph
// captured and replayed), an absorbed pass of 301 tokens (the activation buffers grow, so the runner drops
// its graphs), three more decode steps (the graph captured again): a graph must never keep a buffer's
// old address (CudaModelRunner::ActivationPtrs).
std::vector<float> DummyV3DecodeLogits(int layers, bool tc, int emulate, bool sm90 = false, int sm90_variant = 0,
                                       int64_t* q_bf16_layers = nullptr, bool growth = false) {
  CudaRunnerOptions o = DummyV3Options(layers, 16, 5);
  o.mla_decode_q_bf16 = q_bf16_layers != nullptr;
  o.mla_mode = MlaMode::kAbsorbed;
  o.mla_decode_tensor_cores = tc;
  o.mla_decode_emulate_tc = emulate;
  o.mla_decode_sm90 = sm90;
  o.mla_decode_sm90_variant = sm90_variant;
  o.mla_decode_sm90_small_variant = -1;  // the variant asked for at every batch size
  auto r = CreateCudaModelRunner(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  ModelRunner& m = **r;
  const int64_t V = m.config().vocab_size;
  std::vector<float> logits;
  auto step = [&](const std::vector<int>& n_new, const std::vector<int>& ctx0) {
    ForwardBatch b;
    b.max_blocks = 8;
    b.query_start = {0};
    for (size_t s = 0; s < n_new.size(); ++s) {
      for (int i = 0; i < n_new[s]; ++i) {
        b.token_ids.push_back((ctx0[s] + i * 7919 + 13 * static_cast<int>(s)) % V);
        b.positions.push_back(ctx0[s] + i);
      }
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
      b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.context_lens.push_back(ctx0[s] + n_new[s]);
      for (int k = 0; k < 8; ++k) b.block_tables.push_back(static_cast<int32_t>(s) * 8 + k);
    }
    ForwardOutput out;
    auto st = m.Forward(b, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  };
  if (growth) {
    step({1, 1}, {0, 0});
    for (int k = 0; k < 3; ++k) step({1, 1}, {1 + k, 1 + k});
    step({300, 1}, {4, 4});
    for (int k = 0; k < 3; ++k) step({1, 1}, {304 + k, 5 + k});
  } else {
    step({300, 70}, {0, 0});
    for (int k = 0; k < 4; ++k) step({1, 1}, {300 + k, 70 + k});
    step({2, 1}, {304, 74});
  }
  if (q_bf16_layers != nullptr) *q_bf16_layers = GetCudaGraphStats(m).mla_q_bf16_layers;
  return logits;
}

// Whether the sm_90a MLA decode kernel runs here at V3's MLA shapes (kv_lora 512, rope 64,
// 64-token blocks): a CUDA device is present and MlaDecodeSm90Supported accepts them.
bool Sm90MlaDecodeAvailable() {
  int n = 0;
  MlaDecodeParams p{};
  p.kv_lora = 512; p.rope_dim = 64; p.block_size = 64;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && MlaDecodeSm90Supported(p);
}
constexpr const char* kNoSm90MlaDecode = "the sm_90a MLA decode kernel needs an sm_90 (Hopper) device";

TEST(CudaRunner, DummyV3DecodeTensorCoresMatchEmulation) {
  if (!std::filesystem::exists(DataDir() + "/deepseek-v3/config.json")) GTEST_SKIP();
  constexpr int64_t V = 129280;
  constexpr double kBound = 0.9999;
  for (int layers : {3, 4}) {
    const auto cc = DummyV3DecodeLogits(layers, false, 0);
    const auto tc = DummyV3DecodeLogits(layers, true, 0);
    const auto emu_q = DummyV3DecodeLogits(layers, false, 1);
    const auto emu_p = DummyV3DecodeLogits(layers, false, 2);
    const auto emu = DummyV3DecodeLogits(layers, false, 3);
    ASSERT_FALSE(tc.empty());
    int64_t bad = 0;
    for (float v : tc) bad += !std::isfinite(v);
    EXPECT_EQ(bad, 0);
    char label[128];
    const RowStats te = Compare(tc, emu, V, kBound);
    std::snprintf(label, sizeof label, "dummy_v3_%dlayers mla_decode tc_vs_emulation(bf16 q+P) (bounded)", layers);
    PrintStats(label, te, kBound);
    std::snprintf(label, sizeof label, "dummy_v3_%dlayers mla_decode cudacore_vs_tc (information)", layers);
    PrintStats(label, Compare(cc, tc, V, 0.999), 0.999);
    std::snprintf(label, sizeof label, "dummy_v3_%dlayers mla_decode cudacore_vs_emulation(bf16 q+P) (information)", layers);
    PrintStats(label, Compare(cc, emu, V, 0.999), 0.999);
    std::snprintf(label, sizeof label, "dummy_v3_%dlayers mla_decode cudacore_vs_emulation(bf16 q only) (information)", layers);
    PrintStats(label, Compare(cc, emu_q, V, 0.999), 0.999);
    std::snprintf(label, sizeof label, "dummy_v3_%dlayers mla_decode cudacore_vs_emulation(bf16 P only) (information)", layers);
    PrintStats(label, Compare(cc, emu_p, V, 0.999), 0.999);
    if (layers <= 3) {
      EXPECT_GE(te.min_cos, kBound) << layers << " layers";
    } else {
      EXPECT_GE(te.median_cos, kBound) << layers << " layers";
      EXPECT_LE(te.below, te.rows / 4) << layers << " layers";
    }
  }
}

// The sm_90a wgmma decode kernel (mla_decode_sm90.cu, opt-in: CudaRunnerOptions::mla_decode_sm90)
// in the whole dummy-V3 model (128 heads: every absorbed call selects it, the 300-token prompt
// included) vs the CUDA-core emulation of its rounding and split plan (emulate 3 with the option
// on), at the bound of DummyV3DecodeTensorCoresMatchEmulation for 3 layers (every row); the
// default tc path vs the sm90 kernel printed as information.
TEST(CudaRunner, DummyV3DecodeSm90MatchEmulation) {
  if (!std::filesystem::exists(DataDir() + "/deepseek-v3/config.json")) GTEST_SKIP();
  if (!Sm90MlaDecodeAvailable()) GTEST_SKIP() << kNoSm90MlaDecode;
  constexpr int64_t V = 129280;
  constexpr double kBound = 0.9999;
  const auto sm90 = DummyV3DecodeLogits(3, true, 0, true);
  const auto emu = DummyV3DecodeLogits(3, false, 3, true);
  const auto tc = DummyV3DecodeLogits(3, true, 0, false);
  ASSERT_FALSE(sm90.empty());
  int64_t bad = 0;
  for (float v : sm90) bad += !std::isfinite(v);
  EXPECT_EQ(bad, 0);
  const RowStats se = Compare(sm90, emu, V, kBound);
  PrintStats("dummy_v3_3layers mla_decode sm90_vs_emulation(bf16 q+P, sm90 plan) (bounded)", se, kBound);
  PrintStats("dummy_v3_3layers mla_decode tc_vs_sm90 (information)", Compare(tc, sm90, V, 0.999), 0.999);
  EXPECT_GE(se.min_cos, kBound);
}

// The same for the sm90 "seesaw" variant (CudaRunnerOptions::mla_decode_sm90_variant = 1; same
// split plan and numerics, so the same emulation and bound); variant 1 vs variant 0 printed.
TEST(CudaRunner, DummyV3DecodeSm90SeesawMatchEmulation) {
  if (!std::filesystem::exists(DataDir() + "/deepseek-v3/config.json")) GTEST_SKIP();
  if (!Sm90MlaDecodeAvailable()) GTEST_SKIP() << kNoSm90MlaDecode;
  constexpr int64_t V = 129280;
  constexpr double kBound = 0.9999;
  const auto v1 = DummyV3DecodeLogits(3, true, 0, true, 1);
  const auto emu = DummyV3DecodeLogits(3, false, 3, true);
  const auto v0 = DummyV3DecodeLogits(3, true, 0, true, 0);
  ASSERT_FALSE(v1.empty());
  int64_t bad = 0;
  for (float v : v1) bad += !std::isfinite(v);
  EXPECT_EQ(bad, 0);
  const RowStats se = Compare(v1, emu, V, kBound);
  PrintStats("dummy_v3_3layers mla_decode sm90_seesaw_vs_emulation(bf16 q+P, sm90 plan) (bounded)", se, kBound);
  PrintStats("dummy_v3_3layers mla_decode sm90_v0_vs_seesaw (information)", Compare(v0, v1, V, 0.999), 0.999);
  EXPECT_GE(se.min_cos, kBound);
}

// Variant 4 (three warpgroups): the same S, P and P V as variant 0, so the whole model's logits
// must be bit-equal to variant 0's.
TEST(CudaRunner, DummyV3DecodeSm90VariantsBitEqual) {
  if (!std::filesystem::exists(DataDir() + "/deepseek-v3/config.json")) GTEST_SKIP();
  if (!Sm90MlaDecodeAvailable()) GTEST_SKIP() << kNoSm90MlaDecode;
  const auto v0 = DummyV3DecodeLogits(3, true, 0, true, 0);
  ASSERT_FALSE(v0.empty());
  for (int variant : {4}) {
    const auto vn = DummyV3DecodeLogits(3, true, 0, true, variant);
    ASSERT_EQ(vn.size(), v0.size());
    int64_t diff = 0;
    for (size_t i = 0; i < vn.size(); ++i) diff += !(vn[i] == v0[i]);
    std::printf("[metric] dummy_v3_3layers mla_decode sm90_v%d_vs_v0 differing logits %lld of %zu\n", variant,
                static_cast<long long>(diff), vn.size());
    EXPECT_EQ(diff, 0) << "variant " << variant;
  }
}

// Variant 16 (session 41): variant 15 with each K tile multicast to the two 64-row CTAs of a token (a
// cluster of two). The same data in shared memory and the same arithmetic, so the whole model's logits
// must equal variant 15's bit for bit (128 heads: every decode pass takes the cluster form, the
// captured graphs included).
TEST(CudaRunner, DummyV3DecodeSm90MulticastBitEqual) {
  if (!std::filesystem::exists(DataDir() + "/deepseek-v3/config.json")) GTEST_SKIP();
  if (!Sm90MlaDecodeAvailable()) GTEST_SKIP() << kNoSm90MlaDecode;
  const auto v15 = DummyV3DecodeLogits(3, true, 0, true, 15);
  const auto v16 = DummyV3DecodeLogits(3, true, 0, true, 16);
  ASSERT_FALSE(v15.empty());
  ASSERT_EQ(v16.size(), v15.size());
  int64_t diff = 0;
  for (size_t i = 0; i < v16.size(); ++i) diff += std::memcmp(&v16[i], &v15[i], sizeof(float)) != 0;
  std::printf("[metric] dummy_v3_3layers mla_decode sm90_v16_vs_v15 differing logits %lld of %zu\n",
              static_cast<long long>(diff), v16.size());
  EXPECT_EQ(diff, 0);
}

// CudaRunnerOptions::mla_decode_q_bf16 (session 40): the sm_90a decode reads a bf16 copy of q_lat
// (F32ToBf16, RN) instead of rounding the fp32 q_lat itself (RN): the same logits bit for bit, at the
// default variant and at 15; the path must have run (its layer count > 0). The growth steps check that
// the bf16 q_lat buffer is among the activations whose growth drops the captured graphs.
TEST(CudaRunner, DummyV3DecodeSm90QBf16BitEqual) {
  if (!std::filesystem::exists(DataDir() + "/deepseek-v3/config.json")) GTEST_SKIP();
  if (!Sm90MlaDecodeAvailable()) GTEST_SKIP() << kNoSm90MlaDecode;
  for (int variant : {0, 15, -1}) {
    const bool growth = variant < 0;  // the growth steps, at variant 0
    const int v = growth ? 0 : variant;
    const auto ref = DummyV3DecodeLogits(3, true, 0, true, v, nullptr, growth);
    int64_t layers = 0;
    const auto qb = DummyV3DecodeLogits(3, true, 0, true, v, &layers, growth);
    ASSERT_FALSE(ref.empty());
    ASSERT_EQ(qb.size(), ref.size());
    int64_t diff = 0;
    for (size_t i = 0; i < qb.size(); ++i) diff += std::memcmp(&qb[i], &ref[i], sizeof(float)) != 0;
    std::printf("[metric] dummy_v3_3layers mla_decode sm90_v%d%s q_bf16 vs q: differing logits %lld of %zu (%lld layers took it)\n",
                v, growth ? " growth" : "", static_cast<long long>(diff), qb.size(), static_cast<long long>(layers));
    EXPECT_GT(layers, 0) << "variant " << v << (growth ? " growth" : "") << ": no layer read a bf16 q_lat";
    EXPECT_EQ(diff, 0) << "variant " << v << (growth ? " growth" : "");
  }
}

// The fixture with DeepSeek-V3's MLA dims (v3_mla512_tiny: kv_lora 512, rope 64, nope 128,
// v 128, 3 heads, a dense and a MoE layer), the only fixture whose absorbed decode runs on the
// tensor-core kernel: for each decode backend (tensor cores = the default, the CUDA-core
// kernel, and the CUDA-core kernel emulating the tc rounding), (1) the prompt prefilled in
// kAbsorbed mode (50 query rows of one sequence through the decode kernel: causal masking
// inside the query block, two 32-key tiles) vs golden's prompt logits, and (2) a kAuto prefill
// (naive) then teacher-forced decode over golden's greedy ids (one token a step through the
// paged cache, crossing the 64-token page; CUDA graphs on) vs golden's logits of each step:
// cosine >= 0.999 per position, as every fixture. tc vs emulation: cosine >= 0.9999 per row
// (the bf16-activation floor of DummyV3DecodeTensorCoresMatchEmulation; run 6: min 0.999973,
// against 0.999776 for tc vs cuda-core).
TEST(CudaRunner, MlaV3DimsFixtureDecodeBackends) {
  const std::string dir = DataDir() + "/v3_mla512_tiny";
  std::ifstream in(dir + "/golden.json");
  ASSERT_TRUE(in.good()) << dir;
  const nlohmann::json g = nlohmann::json::parse(in);
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = g["greedy_ids"].get<std::vector<int32_t>>();
  const auto prompt_logits = g["prompt_logits"].get<std::vector<std::vector<float>>>();
  const auto step_logits = g["greedy_logits"].get<std::vector<std::vector<float>>>();
  const int P = static_cast<int>(prompt.size()), nb = 4;
  // The fourth: the tensor-core kernel with the W_UV epilogue (fused_uv) in the decode steps.
  struct Backend { const char* name; bool tc; int emu; bool uv; };
  const Backend backends[] = {{"tensor-core", true, 0, false},
                              {"cuda-core", false, 0, false},
                              {"cuda-core-emulating-tc", false, 3, false},
                              {"tensor-core+fused_uv", true, 0, true}};
  std::vector<std::vector<float>> all(4);
  int64_t V = 0;
  for (int bi = 0; bi < 4; ++bi) {
    const Backend& be = backends[bi];
    for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kAuto}) {
      CudaRunnerOptions o;
      o.model_dir = dir;
      o.num_kv_blocks = nb;
      o.mla_mode = mode;
      o.mla_decode_tensor_cores = be.tc;
      o.mla_decode_sm90 = false;  // the mma.sync / CUDA-core backends (the sm90 kernel: DummyV3DecodeSm90*)
      o.mla_decode_emulate_tc = be.emu;
      o.fused_uv = be.uv;
      auto r = CreateCudaModelRunner(o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      V = (*r)->config().vocab_size;
      ForwardOutput out;
      double min_cos = 1;
      std::vector<float> got;
      if (mode == MlaMode::kAbsorbed) {
        ASSERT_TRUE((*r)->Forward(Batch(prompt, 0, nb, true), &out).ok());
        for (int i = 0; i < P; ++i) min_cos = std::min(min_cos, Cosine(out.logits.data() + i * V, prompt_logits[i].data(), V));
        got = out.logits;
      } else {
        ASSERT_TRUE((*r)->Forward(Batch(prompt, 0, nb, false), &out).ok());
        got = out.logits;
        for (size_t i = 1; i < greedy.size(); ++i) {
          ASSERT_TRUE((*r)->Forward(Batch({greedy[i - 1]}, P + static_cast<int32_t>(i) - 1, nb, false), &out).ok());
          got.insert(got.end(), out.logits.begin(), out.logits.end());
        }
        for (size_t i = 0; i < greedy.size(); ++i)
          min_cos = std::min(min_cos, Cosine(got.data() + i * V, step_logits[i].data(), V));
      }
      std::printf("[fixture] v3_mla512_tiny decode=%s %s: positions=%zu min_cosine_vs_golden=%.7f%s\n", be.name,
                  mode == MlaMode::kAbsorbed ? "absorbed_prompt" : "teacher_forced_decode",
                  got.size() / static_cast<size_t>(V), min_cos, min_cos >= kMinCosine ? " PASS" : " FAIL");
      EXPECT_GE(min_cos, kMinCosine) << be.name;
      all[bi].insert(all[bi].end(), got.begin(), got.end());
    }
  }
  const RowStats te = Compare(all[0], all[2], V, 0.9999);
  PrintStats("v3_mla512_tiny mla_decode tc_vs_emulation(bf16 q+P)", te, 0.9999);
  PrintStats("v3_mla512_tiny mla_decode tc_vs_cudacore", Compare(all[0], all[1], V, 0.9999), 0.9999);
  PrintStats("v3_mla512_tiny mla_decode tc_vs_tc_fused_uv", Compare(all[0], all[3], V, 0.9999), 0.9999);
  EXPECT_GE(te.min_cos, 0.9999);
}

// Real V3 shapes, dummy FP8 weights: naive-MLA prefill attention on tensor cores
// (mla_prefill_tc.cu, bf16 K/V from kv_b_proj) vs the fp32 CUDA-core kernel (fp32 K/V), same
// weights: prompts of 300 and 70 tokens together, then a 40-token chunk extending the first
// (chunked prefill over the paged cache) with a 1-token step of the second (kNaive, so it takes
// the prefill kernel too); logits of every row. The difference is bf16 q, k, v and
// probabilities in attention (op-level bounds in test_mla_prefill.cpp).
// GPU run 2026-11-29 (bench/results/mla_prefill_tc_2026-11-29_prefill_runner.log), 4 layers
// only, asserting min cosine >= 0.999: FAILED with min 0.990205, mean 0.999511 over 411 rows;
// the tensor-core decode check on the same model shows the same pattern (min 0.9928,
// KERNELS_RUNS.md). Layer 3 is V3's first MoE layer (first_k_dense_replace = 3): noaux_tc
// routing over 256 random experts has near-ties that a 1e-3 perturbation of the router input
// flips, moving a few rows a lot, while a K/V layout or masking bug would move every row. So:
//   - 3 layers (all dense, no routing): min cosine >= 0.999 (not yet run on the GPU);
//   - 4 layers: mean cosine >= 0.999 (measured 0.9995) and no non-finite logits; min printed.
// sm90_vs_tc: compare the mma.sync tensor-core kernel (runner 0) with the sm_90a kernel
// (runner 1, CudaRunnerOptions::mla_prefill_sm90) instead.
std::vector<double> PrefillTcVsCudaCoreCosines(const std::string& dir, int layers, bool sm90_vs_tc = false) {
  std::vector<std::vector<float>> logits(2);
  int64_t V = 0;
  for (int tc = 0; tc < 2; ++tc) {
    CudaRunnerOptions o;
    o.model_dir = dir;
    o.load_format = "dummy";
    o.num_layers = layers;
    o.num_kv_blocks = 16;
    o.seed = 5;
    o.mla_mode = MlaMode::kNaive;
    o.mla_prefill_tensor_cores = sm90_vs_tc || tc == 1;
    o.mla_prefill_sm90 = sm90_vs_tc && tc == 1;
    auto r = CreateCudaModelRunner(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    ModelRunner& m = **r;
    V = m.config().vocab_size;
    auto step = [&](const std::vector<int>& n_new, const std::vector<int>& ctx0) {
      ForwardBatch b;
      b.max_blocks = 8;
      b.query_start = {0};
      for (size_t s = 0; s < n_new.size(); ++s) {
        for (int i = 0; i < n_new[s]; ++i) {
          b.token_ids.push_back((ctx0[s] + i * 7919 + 13 * static_cast<int>(s)) % V);
          b.positions.push_back(ctx0[s] + i);
          b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);  // every row
        }
        b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
        b.context_lens.push_back(ctx0[s] + n_new[s]);
        for (int k = 0; k < 8; ++k) b.block_tables.push_back(static_cast<int32_t>(s) * 8 + k);
      }
      ForwardOutput out;
      auto st = m.Forward(b, &out);
      EXPECT_TRUE(st.ok()) << st.ToString();
      logits[tc].insert(logits[tc].end(), out.logits.begin(), out.logits.end());
    };
    step({300, 70}, {0, 0});
    step({40, 1}, {300, 70});
  }
  EXPECT_EQ(logits[0].size(), logits[1].size());
  if (logits[0].size() != logits[1].size() || V == 0) return {};
  const int64_t R = static_cast<int64_t>(logits[0].size()) / V;
  std::vector<double> cos(R);
  for (int64_t i = 0; i < R; ++i) {
    bool finite = true;
    for (int64_t j = 0; j < V; ++j) finite = finite && std::isfinite(logits[1][i * V + j]);
    cos[i] = finite ? Cosine(logits[0].data() + i * V, logits[1].data() + i * V, V) : -2.0;  // -2: non-finite row
  }
  return cos;
}

TEST(CudaRunner, DummyV3PrefillTensorCoresMatchesCudaCore) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  for (int layers : {3, 4}) {
    const std::vector<double> cos = PrefillTcVsCudaCoreCosines(dir, layers);
    ASSERT_FALSE(cos.empty());
    double min_cos = 1, sum = 0;
    int64_t below = 0, bad = 0;
    for (double c : cos) {
      min_cos = std::min(min_cos, c);
      sum += c;
      below += c < 0.999;
      bad += c == -2.0;
    }
    const double mean = sum / static_cast<double>(cos.size());
    const bool pass = bad == 0 && (layers == 3 ? min_cos >= 0.999 : mean >= 0.999);
    std::printf("[fixture] dummy_v3_%dlayers mla_prefill_tc_vs_cudacore: rows=%zu min_cosine=%.6f mean_cosine=%.6f "
                "rows_below_0.999=%lld nonfinite_rows=%lld%s\n", layers, cos.size(), min_cos, mean, (long long)below,
                (long long)bad, pass ? " PASS" : " FAIL");
    EXPECT_EQ(bad, 0) << layers << " layers";
    if (layers == 3) EXPECT_GE(min_cos, 0.999) << "dense layers only";
    else EXPECT_GE(mean, 0.999) << "with the first MoE layer";
  }
}

// The same check for the sm_90a MLA prefill kernel (CudaRunnerOptions::mla_prefill_sm90)
// against the mma.sync tensor-core kernel: same numerics (bf16 q/k/v/P), other tile sizes (128
// keys vs 64, so other running maxima for the bf16 P rounding) and accumulation order; same
// bounds (3 dense layers: min cosine >= 0.999; 4 layers: mean >= 0.999, no non-finite logits).
// Not yet run on the GPU.
TEST(CudaRunner, DummyV3PrefillSm90MatchesTc) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
      !(prop.major == 9 && prop.minor == 0))
    GTEST_SKIP() << "the sm_90a MLA prefill kernel needs a compute capability 9.0 device";
  for (int layers : {3, 4}) {
    const std::vector<double> cos = PrefillTcVsCudaCoreCosines(dir, layers, true);
    ASSERT_FALSE(cos.empty());
    double min_cos = 1, sum = 0;
    int64_t bad = 0;
    for (double c : cos) {
      min_cos = std::min(min_cos, c);
      sum += c;
      bad += c == -2.0;
    }
    const double mean = sum / static_cast<double>(cos.size());
    // Not vacuous: if the runner had not dispatched to the sm_90a kernel, both runs would be
    // the same deterministic kernel and every row's cosine would be 1 to rounding.
    EXPECT_LT(min_cos, 1.0 - 1e-9) << "the sm_90a kernel did not run (MlaPrefillSm90Supported false?)";
    const bool pass = bad == 0 && (layers == 3 ? min_cos >= 0.999 : mean >= 0.999);
    std::printf("[fixture] dummy_v3_%dlayers mla_prefill_sm90_vs_tc: rows=%zu min_cosine=%.6f mean_cosine=%.6f "
                "nonfinite_rows=%lld%s\n", layers, cos.size(), min_cos, mean, (long long)bad, pass ? " PASS" : " FAIL");
    EXPECT_EQ(bad, 0) << layers << " layers";
    if (layers == 3) EXPECT_GE(min_cos, 0.999) << "dense layers only";
    else EXPECT_GE(mean, 0.999) << "with the first MoE layer";
  }
}


// CudaRunnerOptions::sm90_mixed_gemm: the default FP8 numerics' GEMMs at prefill sizes (the
// dense projections and the expert GEMMs) on the sm_90a mixed-input kernel
// (grouped_gemm_sm90_mixed.h) vs the mma.sync kernel (option off). Real V3 shapes, dummy FP8
// weights, one 320-token prompt (every dense projection non-skinny: M > 128; the MoE layer has
// 320 x 8 rows, > 8 per expert on average), logits of every row. Per weight the two differ by
// the bf16 rounding of the scaled weight (<= 2^-9 relative: the floor the bf16 activations
// already have), so the bounds of the other kernel swaps: 3 dense layers min cosine >= 0.999;
// 4 layers (the first MoE layer: routing near-ties can flip an expert and move single rows)
// mean >= 0.999; no non-finite logits; and the rows must differ somewhere (min cosine
// < 1 - 1e-9), else the new kernel did not run. Not yet run on the GPU.
TEST(CudaRunner, DummyV3Sm90MixedGemmMatchesMmaSync) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  if (!GroupedGemmSm90MixedAvailable())
    GTEST_SKIP() << "no sm_90a mixed-input grouped GEMM (built without CUTLASS, or not a compute capability 9.0 device)";
  constexpr int kTokens = 320;
  for (int layers : {3, 4}) {
    std::array<std::vector<float>, 2> logits;
    int64_t V = 0;
    for (int on = 0; on < 2; ++on) {
      CudaRunnerOptions o = DummyV3Options(layers, 16, 5);
      o.sm90_mixed_gemm = on == 1;
      auto r = CreateCudaModelRunner(o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      V = (*r)->config().vocab_size;
      std::vector<int32_t> ids;
      for (int i = 0; i < kTokens; ++i) ids.push_back(static_cast<int32_t>((int64_t{i} * 104729 + 31) % V));
      ForwardOutput out;
      auto st = (*r)->Forward(Batch(ids, 0, 8, true), &out);
      ASSERT_TRUE(st.ok()) << st.ToString();
      logits[on] = std::move(out.logits);
    }
    int64_t bad = 0;
    for (float v : logits[1]) bad += !std::isfinite(v);
    const RowStats st = Compare(logits[0], logits[1], V, 0.999);
    char label[96];
    std::snprintf(label, sizeof label, "dummy_v3_%dlayers sm90_mixed_gemm_vs_mma_sync", layers);
    PrintStats(label, st, 0.999);
    const bool pass = bad == 0 && st.min_cos < 1.0 - 1e-9 && (layers == 3 ? st.min_cos >= 0.999 : st.mean_cos >= 0.999);
    std::printf("[fixture] dummy_v3_%dlayers sm90_mixed_gemm: nonfinite=%lld%s\n", layers, (long long)bad,
                pass ? " PASS" : " FAIL");
    EXPECT_EQ(bad, 0) << layers << " layers";
    EXPECT_LT(st.min_cos, 1.0 - 1e-9) << "the sm_90a mixed-input kernel did not run (GroupedGemmSm90MixedUnsupported?)";
    if (layers == 3) EXPECT_GE(st.min_cos, 0.999) << "dense layers only";
    else EXPECT_GE(st.mean_cos, 0.999) << "with the first MoE layer";
  }
}

// CUDA graphs for decode steps: a runner with graphs on and one with graphs off (same weights)
// prefill the same 40 sequences (1..~700 tokens, so captured block-table widths of 4 and 16
// blocks), then decode 18 steps of 1..40 sequences (each size twice, so the second step of a
// shape replays its graph) over rotating subsets (a mix of context lengths per step).
// Batch sizes equal to a bucket run the same kernels at the same shapes as the eager path:
// logits must match within 1e-6 relative L2 (expected bitwise: the extra split-KV chunks of
// the captured width are empty and add exact zeros). Sizes between buckets run the GEMMs at the
// padded M, where cuBLASLt may pick another algorithm (fp32 accumulation order): measured and
// printed, bounded by cosine >= 0.999 per row (bitwise = true: the CUDA-core decode).
// With the tensor-core MLA decode (DeepSeek-V3 dims; bitwise = false) the split plan (keys per
// split) comes from host hints: the real contexts in an eager step, the bucket x captured
// width in a graph. The padded step of 40 sequences (bucket 48, width 16 blocks) gets 384-key
// splits in the graph against 256 eagerly, so its bf16 probabilities round against other
// running maxima; those rows' latents then feed the later steps of the same sequences
// through the cache, so later bucket-size steps differ too. So every row is bounded by
// cosine >= 0.999 (run 6: min 0.99995; bucket-size rows max relative L2 3.6e-3, padded
// 9.6e-3: the bf16 floor of DummyV3DecodeTensorCoresMatchEmulation); the cuda-core variant
// keeps the exact check of the graph machinery.
void CheckGraphsMatchEager(const std::string& label, CudaRunnerOptions o, bool bitwise = true) {
  constexpr int kSeqs = 40, kMaxBlocks = 16;
  o.num_kv_blocks = kSeqs * kMaxBlocks;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;
  for (int i = 0; i < 2; ++i) {
    o.cuda_graphs = i == 0;
    auto r = CreateCudaModelRunner(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    runners[i] = std::move(r).value();
  }
  const int64_t V = runners[0]->config().vocab_size;
  std::vector<int> ctx(kSeqs);
  for (int s = 0; s < kSeqs; ++s) ctx[s] = s == 7 ? 700 : 1 + (s * 97) % 260;
  auto token = [&](int s, int p) { return static_cast<int32_t>((int64_t{s} * 7919 + int64_t{p} * 104729 + 3) % V); };
  // Prefill (eager in both runners).
  const ForwardBatch pre = PrefillBatch(ctx, kMaxBlocks, token, /*last_logits=*/false);
  for (auto& r : runners) {
    ForwardOutput out;
    auto st = r->Forward(pre, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const std::set<int> buckets = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256};
  const std::vector<int> sizes = {1, 1, 3, 3, 8, 8, 13, 13, 24, 24, 40, 40, 5, 5, 16, 16, 32, 32};
  double worst_exact = 0, worst_other = 0, min_cos_other = 1, min_cos_all = 1;
  int64_t nonfinite = 0, rows_exact = 0, rows_other = 0;
  for (size_t step = 0; step < sizes.size(); ++step) {
    const int n = sizes[step];
    ForwardBatch b;
    b.max_blocks = kMaxBlocks;
    b.query_start = {0};
    std::vector<int> seqs;
    for (int i = 0; i < n; ++i) seqs.push_back(static_cast<int>(((step / 2) * 7 + i) % kSeqs));
    for (int s : seqs) {
      b.token_ids.push_back(token(s, ctx[s]));
      b.positions.push_back(ctx[s]);
      b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.context_lens.push_back(ctx[s] + 1);
      for (int k = 0; k < kMaxBlocks; ++k) b.block_tables.push_back(s * kMaxBlocks + k);
    }
    // Logits of every row, in reverse order (the indices are honoured, not assumed).
    for (int i = n - 1; i >= 0; --i) b.logits_indices.push_back(i);
    std::array<ForwardOutput, 2> outs;
    for (int i = 0; i < 2; ++i) {
      auto st = runners[i]->Forward(b, &outs[i]);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    for (int s : seqs) ++ctx[s];
    const bool exact = buckets.count(n) > 0;
    for (int r = 0; r < n; ++r) {
      const float* g = outs[0].logits.data() + int64_t{r} * V;
      const float* e = outs[1].logits.data() + int64_t{r} * V;
      double d2 = 0, e2 = 0;
      for (int64_t j = 0; j < V; ++j) {
        nonfinite += !std::isfinite(g[j]);
        d2 += (double(g[j]) - e[j]) * (double(g[j]) - e[j]);
        e2 += double(e[j]) * e[j];
      }
      const double rel = std::sqrt(d2 / (e2 + 1e-300));
      min_cos_all = std::min(min_cos_all, Cosine(g, e, V));
      if (exact) { worst_exact = std::max(worst_exact, rel); ++rows_exact; }
      else { worst_other = std::max(worst_other, rel); min_cos_other = std::min(min_cos_other, Cosine(g, e, V)); ++rows_other; }
    }
  }
  const CudaGraphStats gs = GetCudaGraphStats(*runners[0]);
  const CudaGraphStats ge = GetCudaGraphStats(*runners[1]);
  const bool pass = (bitwise ? worst_exact <= 1e-6 && min_cos_other >= 0.999 : min_cos_all >= 0.999) && nonfinite == 0 &&
                    gs.replayed > 0;
  std::printf("[fixture] %s cuda_graphs_vs_eager: steps=%zu graphs captured=%lld replayed=%lld eager_padded=%lld; "
              "bucket-size rows=%lld max_rel_l2=%.3e; padded rows=%lld max_rel_l2=%.3e min_cosine=%.7f; all rows "
              "min_cosine=%.7f; nonfinite=%lld%s\n",
              label.c_str(), sizes.size(), (long long)gs.captured, (long long)gs.replayed, (long long)gs.eager_padded,
              (long long)rows_exact, worst_exact, (long long)rows_other, worst_other, min_cos_other, min_cos_all,
              (long long)nonfinite, pass ? " PASS" : " FAIL");
  EXPECT_EQ(nonfinite, 0);
  if (bitwise) {
    EXPECT_LE(worst_exact, 1e-6);
    EXPECT_GE(min_cos_other, 0.999);
  } else {
    EXPECT_GE(min_cos_all, 0.999);
  }
  // 9 pairs of same-shape steps: the first of a pair runs eagerly and captures, the second
  // replays (unless a context crossed a power-of-2 block-table width in between).
  EXPECT_GE(gs.captured, 5);
  EXPECT_GE(gs.replayed, 5);
  EXPECT_EQ(ge.captured + ge.replayed + ge.eager_padded, 0);
}

TEST(CudaRunner, GraphDecodeMatchesEagerFixture) {
  CudaRunnerOptions o;
  o.model_dir = DataDir() + "/v3_tiny";
  CheckGraphsMatchEager("v3_tiny", o);
}

TEST(CudaRunner, GraphDecodeMatchesEagerDummyV3) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  CudaRunnerOptions o = DummyV3Options(4, /*kv_blocks=*/0, 21);
  o.mla_decode_tensor_cores = false;
  CheckGraphsMatchEager("dummy_v3_4layers cuda-core-decode", o);
}

// The mma.sync tensor-core decode kernel under CUDA graphs vs eager, 3 dense layers (V3's
// first_k_dense): every row cosine >= 0.999. Not bitwise, for the sm_90a check's reason below
// (a padded graph step of more than 8 sequences plans its splits at the bucket's size).
TEST(CudaRunner, GraphDecodeMatchesEagerDummyV3DenseTensorCoreDecode) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  CudaRunnerOptions o = DummyV3Options(3, /*kv_blocks=*/0, 21);
  o.mla_decode_tensor_cores = true;
  o.mla_decode_sm90 = false;  // the mma.sync kernel
  CheckGraphsMatchEager("dummy_v3_3layers tensor-core-decode", o, /*bitwise=*/false);
}

// Information (disabled), like DISABLED_GraphDecodeMatchesEagerDummyV3Sm90Decode: 4 layers
// include the first MoE layer, whose routing near-ties turn the small eager-vs-graph
// differences above into single rows that move. Session 5: with 256-key minimum splits (run 1)
// every row >= 0.99996; with the 64-key small-batch minimum (runs 4-6) the trajectory changes
// and the worst bucket-size row lands at cosine 0.99363 (rel L2 0.113; padded rows >= 0.99996).
// The cuda-core kernel's check is bitwise on every row with the 64-key minimum (its padded
// rows were 2.3e-5 apart before).
TEST(CudaRunner, DISABLED_GraphDecodeMatchesEagerDummyV3TensorCoreDecode) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  CudaRunnerOptions o = DummyV3Options(4, /*kv_blocks=*/0, 21);
  o.mla_decode_tensor_cores = true;
  o.mla_decode_sm90 = false;  // the mma.sync kernel
  CheckGraphsMatchEager("dummy_v3_4layers tensor-core-decode", o, /*bitwise=*/false);
}

// The sm_90a decode kernel under CUDA graphs vs eager. Not bitwise, for the reason the mma.sync
// kernel's check is not: a padded graph step (eager_padded, a non-bucket batch size) runs the
// batch at the bucket's size, whose split plan differs from the unpadded eager pass, and the
// latent rows it writes into the cache at layers >= 1 then differ slightly, so later steps
// read slightly different caches (the kernel itself is bit-equal under the same hints, across
// block-table strides: CudaMlaDecodeSm90.*). 3 dense layers (V3's first_k_dense): every row
// cosine >= 0.999 (session 4 run 3: min 0.99996, as the mma.sync kernel's 0.99995).
TEST(CudaRunner, GraphDecodeMatchesEagerDummyV3DenseSm90Decode) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  if (!Sm90MlaDecodeAvailable()) GTEST_SKIP() << kNoSm90MlaDecode;
  CudaRunnerOptions o = DummyV3Options(3, /*kv_blocks=*/0, 21);
  o.mla_decode_tensor_cores = true;
  o.mla_decode_sm90 = true;
  CheckGraphsMatchEager("dummy_v3_3layers sm90-decode", o, /*bitwise=*/false);
}

// Information (disabled): the same with the first MoE layer (4 layers), where a difference of
// that size can flip a routed expert at a near-tie and move that row alone (session 4 runs 1
// and 3: one row at cosine 0.99363; the other rows >= 0.99996). Run it with
// --gtest_also_run_disabled_tests.
TEST(CudaRunner, DISABLED_GraphDecodeMatchesEagerDummyV3Sm90Decode) {
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  CudaRunnerOptions o = DummyV3Options(4, /*kv_blocks=*/0, 21);
  o.mla_decode_tensor_cores = true;
  o.mla_decode_sm90 = true;
  CheckGraphsMatchEager("dummy_v3_4layers sm90-decode", o, /*bitwise=*/false);
}

// Runner-side sampling (ForwardBatch::sampling): the ids the runner samples on the device equal
// cpu::Sample on the logits the same step returns without sampling (same settings, same
// (seed, step) RNG), for greedy, temperature, top-k and top-p rows, through a CUDA graph
// (decode step, rows in order and reversed) and eagerly (prefill rows of a mixed batch).
TEST(CudaRunner, DeviceSamplingMatchesCpuSample) {
  CudaRunnerOptions o;
  o.model_dir = DataDir() + "/v3_tiny";
  o.num_kv_blocks = 64;
  auto rr = CreateCudaModelRunner(o);
  ASSERT_TRUE(rr.ok()) << rr.status().ToString();
  auto& runner = *rr.value();
  ASSERT_TRUE(runner.CanSample());
  const int64_t V = runner.config().vocab_size;
  constexpr int kSeqs = 12, kMaxBlocks = 4;
  ForwardBatch pre;
  pre.max_blocks = kMaxBlocks;
  pre.query_start = {0};
  for (int s = 0; s < kSeqs; ++s) {
    const int n = 5 + s * 3;
    for (int p = 0; p < n; ++p) { pre.token_ids.push_back(static_cast<int32_t>((s * 131 + p * 17 + 1) % V)); pre.positions.push_back(p); }
    pre.query_start.push_back(static_cast<int32_t>(pre.token_ids.size()));
    pre.context_lens.push_back(n);
    pre.logits_indices.push_back(static_cast<int32_t>(pre.token_ids.size()) - 1);
    for (int k = 0; k < kMaxBlocks; ++k) pre.block_tables.push_back(s * kMaxBlocks + k);
  }
  auto settings = [&](size_t rows) {
    std::vector<RowSampling> rs(rows);
    for (size_t r = 0; r < rows; ++r) {
      rs[r].temperature = r % 4 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>(r % 3);
      rs[r].top_p = r % 2 ? 0.9f : 1.0f;
      rs[r].top_k = r % 3 == 1 ? 5 : 0;
      rs[r].seed = 77 + r;
      rs[r].step = r * 3;
    }
    return rs;
  };
  int64_t checked = 0, mismatch = 0;
  auto check = [&](ForwardBatch b, const char* what) {
    ForwardOutput with_logits, with_ids;
    ASSERT_TRUE(runner.Forward(b, &with_logits).ok());
    b.sampling = settings(b.logits_indices.size());
    auto st = runner.Forward(b, &with_ids);  // same step again: rewrites the same KV entries
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(with_ids.logits.empty());
    ASSERT_EQ(with_ids.token_ids.size(), b.logits_indices.size());
    for (size_t r = 0; r < b.logits_indices.size(); ++r) {
      const RowSampling& x = b.sampling[r];
      const int32_t ref = cpu::Sample({with_logits.logits.data() + r * V, V, x.temperature, x.top_p, x.top_k, x.seed, x.step});
      ++checked;
      if (ref != with_ids.token_ids[r]) {
        ++mismatch;
        std::printf("%s row %zu: device %d cpu %d\n", what, r, with_ids.token_ids[r], ref);
      }
    }
  };
  check(pre, "prefill");
  std::vector<int32_t> ctx(pre.context_lens);
  for (int step = 0; step < 3; ++step) {
    ForwardBatch b;
    b.max_blocks = kMaxBlocks;
    b.query_start = {0};
    for (int s = 0; s < kSeqs; ++s) {
      b.token_ids.push_back(static_cast<int32_t>((s * 7 + step * 11 + 2) % V));
      b.positions.push_back(ctx[s]);
      b.query_start.push_back(s + 1);
      b.context_lens.push_back(ctx[s] + 1);
      for (int k = 0; k < kMaxBlocks; ++k) b.block_tables.push_back(s * kMaxBlocks + k);
      if (step == 1) b.logits_indices.insert(b.logits_indices.begin(), s);  // reversed rows
      else b.logits_indices.push_back(s);
    }
    check(b, step == 1 ? "decode(reversed)" : "decode");
    for (int s = 0; s < kSeqs; ++s) ++ctx[s];
  }
  const CudaGraphStats gs = GetCudaGraphStats(runner);
  std::printf("[metric] op=runner_sampling rows=%lld mismatches=%lld graph_replays=%lld\n", (long long)checked,
              (long long)mismatch, (long long)gs.replayed);
  EXPECT_EQ(mismatch, 0);
  EXPECT_GT(gs.replayed, 0);
}

// Overlap scheduling (ModelRunner::Launch / Finish): a chain of decode steps, each launched before
// the previous one is finished with its token ids taken from that step's sampled rows on the
// device (prev_sample_rows; rows reversed on odd steps; greedy and sampled rows), gives the same
// ids as serial Forward calls with the ids passed from the host, bit for bit. The first steps of
// a graph shape run inside Launch (eager + capture: the previous ids resolved on the host); the
// later ones are queued (the graph replayed, the ids gathered on the device).
// serial_gio / over_gio: CudaRunnerOptions::graph_io of each runner; greedy: every row at
// temperature 0 (the graph's argmax gives every id); split: the overlapped runner's argmax_split
// (the split argmax captured in its graphs).
void RunOverlapCase(bool serial_gio, bool over_gio, bool greedy, bool split = false) {
  CudaRunnerOptions o;
  o.model_dir = DataDir() + "/v3_tiny";
  o.num_kv_blocks = 64;
  o.graph_io = serial_gio;
  auto ra = CreateCudaModelRunner(o);
  o.graph_io = over_gio;
  o.argmax_split = split;
  auto rb = CreateCudaModelRunner(o);
  ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status().ToString() << rb.status().ToString();
  ModelRunner& serial = *ra.value();
  ModelRunner& overlapped = *rb.value();
  ASSERT_TRUE(overlapped.CanOverlap());
  const int64_t V = serial.config().vocab_size;
  constexpr int kSeqs = 3, kMaxBlocks = 4, kSteps = 14;
  ForwardBatch pre;
  pre.max_blocks = kMaxBlocks;
  pre.query_start = {0};
  for (int s = 0; s < kSeqs; ++s) {
    const int n = 20 + s * 9;
    for (int p = 0; p < n; ++p) {
      pre.token_ids.push_back(static_cast<int32_t>((s * 131 + p * 17 + 1) % V));
      pre.positions.push_back(p);
    }
    pre.query_start.push_back(static_cast<int32_t>(pre.token_ids.size()));
    pre.context_lens.push_back(n);
    pre.logits_indices.push_back(static_cast<int32_t>(pre.token_ids.size()) - 1);
    for (int k = 0; k < kMaxBlocks; ++k) pre.block_tables.push_back(s * kMaxBlocks + k);
  }
  auto settings = [greedy](int s, int step) {
    RowSampling r;
    r.temperature = s == 0 || greedy ? 0.0f : 0.7f;
    r.top_k = s == 2 ? 8 : 0;
    r.seed = 1234 + s;
    r.step = static_cast<uint64_t>(step);
    return r;
  };
  pre.sampling = {settings(0, 0), settings(1, 0), settings(2, 0)};
  // Decode step `step` (1-based): the sequences in order, or reversed on odd steps.
  auto decode = [&](int step, const std::vector<int32_t>& ctx) {
    ForwardBatch b;
    b.max_blocks = kMaxBlocks;
    b.query_start = {0};
    for (int i = 0; i < kSeqs; ++i) {
      const int s = step % 2 ? kSeqs - 1 - i : i;
      b.token_ids.push_back(0);
      b.positions.push_back(ctx[s]);
      b.query_start.push_back(i + 1);
      b.context_lens.push_back(ctx[s] + 1);
      for (int k = 0; k < kMaxBlocks; ++k) b.block_tables.push_back(s * kMaxBlocks + k);
      b.logits_indices.push_back(i);
      b.sampling.push_back(settings(s, step));
    }
    return b;
  };
  auto seq_of_row = [&](int step, int row) { return step % 2 ? kSeqs - 1 - row : row; };
  // Serial: Forward, ids from the host. ids[step][s] = sequence s's token sampled at `step`.
  std::vector<std::vector<int32_t>> ids_serial(kSteps + 1, std::vector<int32_t>(kSeqs));
  std::vector<int32_t> ctx(pre.context_lens);
  ForwardOutput out;
  ASSERT_TRUE(serial.Forward(pre, &out).ok());
  for (int s = 0; s < kSeqs; ++s) ids_serial[0][s] = out.token_ids[s];
  for (int step = 1; step <= kSteps; ++step) {
    ForwardBatch b = decode(step, ctx);
    for (int r = 0; r < kSeqs; ++r) b.token_ids[r] = ids_serial[step - 1][seq_of_row(step, r)];
    ASSERT_TRUE(serial.Forward(b, &out).ok());
    for (int r = 0; r < kSeqs; ++r) ids_serial[step][seq_of_row(step, r)] = out.token_ids[r];
    for (int s = 0; s < kSeqs; ++s) ++ctx[s];
  }
  // Overlapped: step k + 1 launched before step k is finished; its ids are step k's rows.
  std::vector<std::vector<int32_t>> ids_over(kSteps + 1, std::vector<int32_t>(kSeqs));
  ctx = pre.context_lens;
  ASSERT_TRUE(overlapped.Launch(pre).ok());
  for (int step = 1; step <= kSteps + 1; ++step) {
    if (step <= kSteps) {
      ForwardBatch b = decode(step, ctx);
      b.prev_sample_rows.resize(kSeqs);
      // Row r is sequence s; s was row seq_of_row(step - 1, .)^-1 of the previous step.
      for (int r = 0; r < kSeqs; ++r) {
        const int s = seq_of_row(step, r);
        b.prev_sample_rows[r] = (step - 1) % 2 ? kSeqs - 1 - s : s;
      }
      const Status st = overlapped.Launch(b);
      ASSERT_TRUE(st.ok()) << st.ToString();
      for (int s = 0; s < kSeqs; ++s) ++ctx[s];
    }
    ASSERT_TRUE(overlapped.Finish(&out).ok());
    const int done = step - 1;
    for (int r = 0; r < kSeqs; ++r) ids_over[done][seq_of_row(done, r)] = out.token_ids[r];
  }
  ASSERT_FALSE(overlapped.Finish(&out).ok());  // nothing left
  EXPECT_EQ(overlapped.NumLaunched(), 0u);
  int mismatches = 0;
  for (int step = 0; step <= kSteps; ++step)
    for (int s = 0; s < kSeqs; ++s) mismatches += ids_serial[step][s] != ids_over[step][s];
  const CudaGraphStats gs = GetCudaGraphStats(overlapped), gss = GetCudaGraphStats(serial);
  std::printf("[metric] op=runner_overlap serial_gio=%d over_gio=%d greedy=%d split=%d steps=%d seqs=%d mismatches=%d "
              "graph_replays=%lld queued=%lld graph_argmax=%lld serial_graph_argmax=%lld\n",
              serial_gio, over_gio, greedy, split, kSteps, kSeqs, mismatches, (long long)gs.replayed, (long long)gs.queued,
              (long long)gs.graph_argmax, (long long)gss.graph_argmax);
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(gs.queued, kSteps / 2);  // most steps queued as graph replays without a wait
  // graph_io with every row greedy: the ids come from the graph's argmax (queued and serial steps).
  if (over_gio && greedy) {
    EXPECT_GT(gs.graph_argmax, kSteps / 2);
  } else {
    EXPECT_EQ(gs.graph_argmax, 0);
  }
  if (serial_gio && greedy) {
    EXPECT_GT(gss.graph_argmax, kSteps / 2);
  }
  // Misuse: prev_sample_rows beyond the previous step's rows, and through Forward.
  ForwardBatch bad = decode(kSteps + 1, ctx);
  bad.prev_sample_rows.assign(kSeqs, kSeqs);
  EXPECT_EQ(overlapped.Launch(bad).code(), StatusCode::kInvalidArgument);
  bad.prev_sample_rows.assign(kSeqs, 0);
  EXPECT_EQ(overlapped.Forward(bad, &out).code(), StatusCode::kInvalidArgument);
}

TEST(CudaRunner, OverlapLaunchMatchesSerialForward) { RunOverlapCase(false, false, false); }

// graph_io (the graph's input copy on a copy stream, the id gather in its embedding kernel, its
// argmax, the ids' copy on a second stream): the same ids as the serial runner without it, with
// sampled rows (sampled after the graph into its id buffer) and with every row greedy (the
// graph's argmax); and its serial (Forward) graph steps against the overlapped steps without it.
TEST(CudaRunner, OverlapLaunchGraphIoMixedRows) { RunOverlapCase(false, true, false); }
TEST(CudaRunner, OverlapLaunchGraphIoGreedy) { RunOverlapCase(false, true, true); }
TEST(CudaRunner, OverlapLaunchGraphIoSerialGreedy) { RunOverlapCase(true, false, true); }
TEST(CudaRunner, OverlapLaunchGraphIoGreedySplitArgmax) { RunOverlapCase(false, true, true, true); }

// The generate CLI's --bench path with graphs on and off: both print the decode step time,
// the header says which mode ran, and the greedy tokens agree (batch 4 = a bucket: same shapes).
TEST(CudaRunner, GenerateBenchWithAndWithoutGraphs) {
  const char* bin = std::getenv("DS_BINARY");
  if (!bin || !std::filesystem::exists(bin)) GTEST_SKIP() << "set DS_BINARY to the dsinfer executable";
  std::array<std::string, 2> outs;
  for (int i = 0; i < 2; ++i) {
    const std::string cmd = std::string(bin) + " generate --device cuda --model " + DataDir() +
                            "/v3_tiny --bench-batch 4 --bench-prompt-len 40 --max-tokens 12" +
                            (i == 1 ? " --disable-cuda-graph" : "") + " 2>/dev/null";
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    while (fgets(buf, sizeof buf, f)) outs[i] += buf;
    ASSERT_EQ(pclose(f), 0) << outs[i];
    const size_t at = outs[i].find("decode_step_ms");
    std::printf("[fixture] generate --bench cuda_graphs=%s: %s", i == 0 ? "on" : "off",
                at == std::string::npos ? "(no decode_step_ms line)\n" : outs[i].substr(at, outs[i].find('\n', at) - at + 1).c_str());
  }
  EXPECT_NE(outs[0].find("cuda_graphs=on"), std::string::npos) << outs[0];
  EXPECT_NE(outs[1].find("cuda_graphs=off"), std::string::npos) << outs[1];
  for (auto& o : outs) EXPECT_NE(o.find("decode_step_ms median="), std::string::npos) << o;
  auto tokens = [](const std::string& o) {
    const size_t at = o.find("seq0_tokens:");
    return at == std::string::npos ? std::string() : o.substr(at);
  };
  EXPECT_FALSE(tokens(outs[0]).empty());
  EXPECT_EQ(tokens(outs[0]), tokens(outs[1]));
}

}  // namespace
}  // namespace ds::cuda::test
