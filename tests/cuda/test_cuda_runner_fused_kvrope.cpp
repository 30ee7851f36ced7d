// CudaRunnerOptions::fused_kvrope on the whole model: in passes of <= 16 tokens MLA's RMSNorm
// of the kv latent c_kv, the q RoPE (with fused_qpe's q_pe copy into q_lat) and the k_pe RoPE
// + paged cache write run as one kernel (MlaKvRope, mla_kv_rope_fused.h) built from the same
// device routines (rmsnorm.cuh, rope.cuh; the norm at RmsNorm's block size, so the same
// reduction order). Same runner options with fused_kvrope off and on, the same dummy weights
// (same seed), RunFusionSchedule (runner_test_util.h: prefill, decode steps of 1..24
// sequences, a mixed step), CUDA graphs on and off, with the other fusions at their defaults,
// all on and all off (fused_qpe off: no q_pe copy), and with precise_activations (which
// changes none of the fused ops' inputs: the fusion applies there too). The fusion changes no
// arithmetic, so the logits must be bit-identical (max |diff| 0), and the fused runner must
// have taken the fused path (fused_kvrope_layers > 0; the unfused one never); per pass it runs
// once per layer in every pass of <= 16 tokens and never in a larger one.
// CudaMlaKvRopeFused.* (test_mla_kv_rope_fused.cpp) checks the op bit for bit. Not yet run on
// the GPU (written without a device).
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr const char* kFixtures[] = {"v3_tiny", "v2_lite_tiny", "v3_mla512_tiny", "v3_rotate_half_tiny"};


void CompareKvRope(const std::string& label, CudaRunnerOptions o, bool graphs) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: fused_kvrope off, 1: on
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.fused_kvrope = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  Diff d;
  RunFusionSchedule(runners, &d);
  const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
  const bool pass = d.nonfinite == 0 && d.max_abs == 0 && (!graphs || g1.replayed > 0) && g1.fused_kvrope_layers > 0 &&
                    g0.fused_kvrope_layers == 0;
  std::printf("[fixture] %s fused_kvrope graphs=%d: rows=%lld max_abs_diff=%.3e differing_logits=%lld nonfinite=%lld "
              "graphs captured=%lld replayed=%lld kvrope layers fused=%lld (unfused runner %lld; expected > 0) "
              "(bit-identical expected)%s\n",
              label.c_str(), graphs ? 1 : 0, (long long)d.rows, d.max_abs, (long long)d.differ,
              (long long)d.nonfinite, (long long)g1.captured, (long long)g1.replayed,
              (long long)g1.fused_kvrope_layers, (long long)g0.fused_kvrope_layers, pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_EQ(d.max_abs, 0.0) << label;
  EXPECT_EQ(d.differ, 0) << label;
  if (graphs) { EXPECT_GT(g1.replayed, 0) << label; }
  EXPECT_GT(g1.fused_kvrope_layers, 0) << label << ": the fused norm + RoPE + cache write never ran";
  EXPECT_EQ(g0.fused_kvrope_layers, 0) << label;
}

void RunVariants(const std::string& label, const CudaRunnerOptions& base, const std::vector<Fusions>& others) {
  for (Fusions f : others) {
    CudaRunnerOptions o = base;
    SetFusions(f, &o);
    for (bool graphs : {false, true}) CompareKvRope(label + " others=" + FusionsName(f), o, graphs);
  }
}

TEST(CudaRunnerFusedKvRope, FixturesMatchUnfused) {
  // v3_rotate_half_tiny: rope_interleave false (rotate-half pairs); the others interleaved.
  for (const char* name : kFixtures) {
    const std::string dir = DataDir() + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    CudaRunnerOptions o;
    o.model_dir = dir;
    RunVariants(name, o, {Fusions::kDefault, Fusions::kAll, Fusions::kNone});
    // MlaMode::kAbsorbed: the 9-token prompt and the mixed step's 3-token sequence absorbed
    // too (q_pe copied into q_lat in those passes as well, with fused_qpe).
    o.mla_mode = MlaMode::kAbsorbed;
    CompareKvRope(std::string(name) + " absorbed", o, true);
  }
}

// precise_activations changes the GEMMs' inputs (bf16 hi + lo), not the norm, the RoPE or the
// cache write: the fusion applies and stays bit-identical.
TEST(CudaRunnerFusedKvRope, PreciseActivationsMatchesUnfused) {
  for (const char* name : kFixtures) {
    const std::string dir = DataDir() + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    CudaRunnerOptions o;
    o.model_dir = dir;
    o.precise_activations = true;
    for (bool graphs : {false, true}) CompareKvRope(std::string(name) + " precise", o, graphs);
  }
}

TEST(CudaRunnerFusedKvRope, DummyV2LiteMatchesUnfused) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  // 16 heads, kv_lora 512, rope 64, no q_lora; interleaved RoPE (deepseek_v2).
  RunVariants("dummy_v2lite_2layers", DummyOptions(dir, 2, 5), {Fusions::kDefault, Fusions::kAll, Fusions::kNone});
}

TEST(CudaRunnerFusedKvRope, DummyV3MatchesUnfused) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  // 128 heads (16 q blocks of 8 warps per token), kv_lora 512, rope 64, q_lora 1536.
  RunVariants("dummy_v3_4layers", DummyOptions(dir, 4, 11), {Fusions::kDefault, Fusions::kAll});
}

// How many layers fuse: every layer, once per pass of <= 16 tokens (prefill or decode), none in
// a larger pass. Eager (graphs off), one runner, the other fusions at their defaults.
TEST(CudaRunnerFusedKvRope, EveryLayerOfADecodeSizePass) {
  std::vector<std::pair<std::string, CudaRunnerOptions>> cases;
  for (const char* name : kFixtures) {
    const std::string dir = DataDir() + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    CudaRunnerOptions o;
    o.model_dir = dir;
    cases.emplace_back(name, o);
  }
  if (const std::string dir = ConfigDir("deepseek-v2-lite"); !dir.empty())
    cases.emplace_back("dummy_v2lite_2layers", DummyOptions(dir, 2, 5));
  if (cases.empty()) GTEST_SKIP() << "no fixture";
  for (auto& [label, base] : cases) {
    CudaRunnerOptions o = base;
    o.num_kv_blocks = 64;
    o.cuda_graphs = false;
    o.fused_kvrope = true;
    auto r = CreateCudaModelRunner(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::unique_ptr<ModelRunner> runner = std::move(r).value();
    const int64_t layers = runner->config().num_hidden_layers;
    const std::vector<int64_t> got =
        FusedCountsPerPass(*runner, [](const CudaGraphStats& g) { return g.fused_kvrope_layers; });
    const std::vector<int64_t> want = {layers, 0, layers};
    const bool pass = got == want && layers > 0;
    std::printf("[fixture] %s fused_kvrope: fused layers per pass %lld / %lld / %lld, expected %lld / 0 / %lld%s\n",
                label.c_str(), got.size() > 0 ? (long long)got[0] : -1LL, got.size() > 1 ? (long long)got[1] : -1LL,
                got.size() > 2 ? (long long)got[2] : -1LL, (long long)layers, (long long)layers, pass ? " PASS" : " FAIL");
    EXPECT_EQ(got, want) << label;
  }
}

}  // namespace
}  // namespace ds::cuda::test
