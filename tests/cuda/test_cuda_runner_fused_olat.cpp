// CudaRunnerOptions::fused_olat on the whole model: absorbed-MLA decode writes o_lat as bf16
// (each decode path's final writer rounds the fp32 value it would have stored with
// __float2bfloat16_rn, as the unfused SplitBf16 does) and the W_UV per-head GEMM reads it
// directly. Same runner options with fused_olat off and on, the same dummy weights (same seed),
// RunFusionSchedule (runner_test_util.h): a prefill (seq 0 alone, 9 tokens, then the others in
// one pass), decode steps of 1..24 sequences (<= 16 tokens: the fused path; 24: unfused in
// both), a mixed step (one sequence of 3 new tokens, naive in kAuto, beside 4 decode rows: the
// !all gather/scatter form) and two more decode steps, CUDA graphs on and off; then the same in MlaMode::kAbsorbed (the 9-token prompt
// and the 3-token step absorbed too: several query rows per sequence). Every decode kernel
// path the runner can select is run: the sm_90a kernel (dummy V3, 128 heads, on an sm_90
// device), the tensor-core row-tile kernel (tensor cores on, sm90 off; V3 dims), the CUDA-core
// kernel (tensor cores off; the fixtures' small kv_lora always), and the tensor-core warp-split
// kernel (> 32K keys of total context at 16 heads: dummy V2-Lite, 4 x ~9K, with and without its
// fused combine). The fusion changes no arithmetic, so the logits must be bit-identical (max
// |diff| 0), and the fused runner must have taken the bf16 path (fused_olat_layers > 0; the
// unfused one never). Not yet run on the GPU (written without a device).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct DecodePath { const char* name; bool tensor_cores, sm90; };
constexpr DecodePath kPaths[] = {
    {"sm90", true, true},           // sm_90a kernel where selected (128 heads), else as tc
    {"tc", true, false},            // mma.sync row-tile kernel (V3 dims), else the CUDA-core kernel
    {"cudacore", false, false},     // CUDA-core split kernel + combine
};

// Runs the schedule above on runners [unfused, fused] and reports the difference.
void CompareOlat(const std::string& label, CudaRunnerOptions o, bool graphs, bool expect_fused = true) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: fused_olat off, 1: on
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.fused_olat = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  Diff d;
  RunFusionSchedule(runners, &d);
  const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
  const bool pass = d.nonfinite == 0 && d.max_abs == 0 && (!graphs || g1.replayed > 0) &&
                    (expect_fused ? g1.fused_olat_layers > 0 : g1.fused_olat_layers == 0) && g0.fused_olat_layers == 0;
  std::printf("[fixture] %s fused_olat graphs=%d: rows=%lld max_abs_diff=%.3e differing_logits=%lld nonfinite=%lld "
              "graphs captured=%lld replayed=%lld olat layers fused=%lld (unfused runner %lld; %s) "
              "(bit-identical expected)%s\n",
              label.c_str(), graphs ? 1 : 0, (long long)d.rows, d.max_abs, (long long)d.differ,
              (long long)d.nonfinite, (long long)g1.captured, (long long)g1.replayed,
              (long long)g1.fused_olat_layers, (long long)g0.fused_olat_layers,
              expect_fused ? "expected > 0" : "expected 0", pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_EQ(d.max_abs, 0.0) << label;
  EXPECT_EQ(d.differ, 0) << label;
  if (graphs) { EXPECT_GT(g1.replayed, 0) << label; }
  if (expect_fused) {
    EXPECT_GT(g1.fused_olat_layers, 0) << label << ": the bf16 o_lat path never ran";
  } else {
    EXPECT_EQ(g1.fused_olat_layers, 0) << label << ": the bf16 o_lat path ran where it must not";
  }
  EXPECT_EQ(g0.fused_olat_layers, 0) << label;
}

// Every decode path, graphs off and on, kAuto; `absorbed` adds MlaMode::kAbsorbed (graphs on).
void RunPaths(const std::string& label, const CudaRunnerOptions& base, bool absorbed) {
  for (const DecodePath& p : kPaths) {
    CudaRunnerOptions o = base;
    o.mla_decode_tensor_cores = p.tensor_cores;
    o.mla_decode_sm90 = p.sm90;
    for (bool graphs : {false, true}) CompareOlat(label + " " + p.name, o, graphs);
    if (absorbed) {
      o.mla_mode = MlaMode::kAbsorbed;
      CompareOlat(label + " " + p.name + " absorbed", o, true);
    }
  }
}

TEST(CudaRunnerFusedOlat, FixturesMatchUnfused) {
  for (const char* name : {"v3_tiny", "v2_lite_tiny", "v3_mla512_tiny"}) {
    const std::string dir = DataDir() + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    CudaRunnerOptions o;
    o.model_dir = dir;
    RunPaths(name, o, /*absorbed=*/true);
  }
}

// precise_activations keeps the fp32 o_lat + hi/lo split: the option must not apply.
TEST(CudaRunnerFusedOlat, PreciseActivationsKeepsTheSplit) {
  const std::string dir = DataDir() + "/v3_mla512_tiny";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.precise_activations = true;
  CompareOlat("v3_mla512_tiny precise", o, false, /*expect_fused=*/false);
}

TEST(CudaRunnerFusedOlat, DummyV2LiteMatchesUnfused) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  // 1 dense + 1 MoE layer (16 heads: the row-tile kernel at these contexts).
  RunPaths("dummy_v2lite_2layers", DummyOptions(dir, 2, 5), /*absorbed=*/false);
}

TEST(CudaRunnerFusedOlat, DummyV3MatchesUnfused) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  // 3 dense + 1 MoE layer (128 heads: the sm_90a kernel with sm90 on, on an sm_90 device).
  RunPaths("dummy_v3_4layers", DummyOptions(dir, 4, 11), /*absorbed=*/true);
}

// The tensor-core warp-split kernel (<= 16 query rows per sequence with > 32K keys of total
// context): dummy V2-Lite's dense layer, 4 sequences at ~9K positions (the cache rows between
// the 100-token prompts and the decode positions are the runner's zero-initialised cache),
// graphs on (warm-up, capture, replays with growing lengths), its combine kernel and its fused
// combine (mla_decode_fused_combine).
TEST(CudaRunnerFusedOlat, DummyV2LiteWarpSplitMatchesUnfused) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (bool fused_combine : {false, true}) {
    constexpr int kSeqs = 4, kMaxBlocks = 160, kPrefill = 100;
    std::array<std::unique_ptr<ModelRunner>, 2> runners;
    for (int i = 0; i < 2; ++i) {
      CudaRunnerOptions o = DummyOptions(dir, 1, 31);
      o.num_kv_blocks = kSeqs * kMaxBlocks;
      o.mla_decode_fused_combine = fused_combine;
      o.fused_olat = i == 1;
      auto r = CreateCudaModelRunner(o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      runners[i] = std::move(r).value();
    }
    const int64_t V = runners[0]->config().vocab_size;
    auto token = [&](int s, int p) { return static_cast<int32_t>((int64_t{s} * 7919 + int64_t{p} * 104729 + 5) % V); };
    Diff d;
    auto run = [&](const ForwardBatch& b) { RunBoth(runners, b, V, &d); };
    run(PrefillBatch(std::vector<int>(kSeqs, kPrefill), kMaxBlocks, token));
    std::vector<int> ctx = {9000, 8999, 9100, 9050};
    for (int step = 0; step < 6; ++step) {
      run(DecodeBatch({0, 1, 2, 3}, ctx, kMaxBlocks, token));
      for (int s = 0; s < kSeqs; ++s) ctx[s] += 1 + step * 37;
    }
    const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
    const bool pass = d.nonfinite == 0 && d.max_abs == 0 && g1.replayed > 0 && g1.fused_olat_layers > 0 &&
                      g0.fused_olat_layers == 0;
    std::printf("[fixture] dummy_v2lite_1layer warp-split%s fused_olat graphs=1: rows=%lld max_abs_diff=%.3e "
                "differing_logits=%lld nonfinite=%lld replayed=%lld olat layers fused=%lld (unfused runner %lld) "
                "(bit-identical expected)%s\n",
                fused_combine ? " fused-combine" : "", (long long)d.rows, d.max_abs, (long long)d.differ,
                (long long)d.nonfinite, (long long)g1.replayed, (long long)g1.fused_olat_layers,
                (long long)g0.fused_olat_layers, pass ? " PASS" : " FAIL");
    EXPECT_EQ(d.nonfinite, 0);
    EXPECT_EQ(d.max_abs, 0.0);
    EXPECT_EQ(d.differ, 0);
    EXPECT_GT(g1.replayed, 0);
    EXPECT_GT(g1.fused_olat_layers, 0);
    EXPECT_EQ(g0.fused_olat_layers, 0);
  }
}

}  // namespace
}  // namespace ds::cuda::test
