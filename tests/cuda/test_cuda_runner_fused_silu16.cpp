// CudaRunnerOptions::fused_silu16 on the whole model: in decode-size passes the dense MLP
// (first_k_dense layers) and the unstacked shared experts run SiLU-and-mul with bf16 output
// (the same fp32 value, stored as its __float2bfloat16_rn, the rounding the unfused SplitBf16
// applies) and the down projection reads it as LinearFwd's x16 (no SplitBf16 launch); only
// where the down projection takes bf16 activations (bf16 weights, FP8 weights dequantised in
// the kernel), never with precise_activations, never where cuBLASLt's FP8 GEMM quantises the
// fp32 activations (fp8_gemm "cublas").
// Same runner options with fused_silu16 off and on, the same dummy weights (same seed),
// RunFusionSchedule (runner_test_util.h: prefill, decode steps of 1..24 sequences, a mixed
// step), CUDA graphs on and off, with the other fusions at their defaults, all on, and all off
// (fused_moe_shared on: the shared experts are stacked, only the dense layers' MLPs fuse;
// fused_norm off: the gate_up input is split again). The fusion changes no arithmetic, so the
// logits must be bit-identical (max |diff| 0), and the fused runner must have taken the bf16
// path (fused_silu16_mlps > 0; the unfused one never). CudaSiluAndMul.Bf16OutputIsSplitOfF32
// (test_silu_and_mul.cpp) checks the op's contract. Not yet run on the GPU (written without a
// device).
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/gemm.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {


// expect_fused: 1 the fused runner must have taken the bf16 path, 0 it must not have, -1 not
// checked (printed only).
void CompareSilu16(const std::string& label, CudaRunnerOptions o, bool graphs, int expect_fused = 1) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: fused_silu16 off, 1: on
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.fused_silu16 = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  Diff d;
  RunFusionSchedule(runners, &d);
  const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
  const bool fused_ok = expect_fused < 0 || (expect_fused ? g1.fused_silu16_mlps > 0 : g1.fused_silu16_mlps == 0);
  const bool pass = d.nonfinite == 0 && d.max_abs == 0 && (!graphs || g1.replayed > 0) && fused_ok &&
                    g0.fused_silu16_mlps == 0;
  std::printf("[fixture] %s fused_silu16 graphs=%d: rows=%lld max_abs_diff=%.3e differing_logits=%lld nonfinite=%lld "
              "graphs captured=%lld replayed=%lld silu16 mlps fused=%lld (unfused runner %lld; %s) "
              "(bit-identical expected)%s\n",
              label.c_str(), graphs ? 1 : 0, (long long)d.rows, d.max_abs, (long long)d.differ,
              (long long)d.nonfinite, (long long)g1.captured, (long long)g1.replayed,
              (long long)g1.fused_silu16_mlps, (long long)g0.fused_silu16_mlps,
              expect_fused < 0 ? "not checked" : expect_fused ? "expected > 0" : "expected 0", pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_EQ(d.max_abs, 0.0) << label;
  EXPECT_EQ(d.differ, 0) << label;
  if (graphs) { EXPECT_GT(g1.replayed, 0) << label; }
  if (expect_fused > 0) {
    EXPECT_GT(g1.fused_silu16_mlps, 0) << label << ": the bf16 SiLU output path never ran";
  } else if (expect_fused == 0) {
    EXPECT_EQ(g1.fused_silu16_mlps, 0) << label << ": the bf16 SiLU output path ran where it must not";
  }
  EXPECT_EQ(g0.fused_silu16_mlps, 0) << label;
}

void RunVariants(const std::string& label, const CudaRunnerOptions& base, const std::vector<Fusions>& others) {
  for (Fusions f : others) {
    CudaRunnerOptions o = base;
    SetFusions(f, &o);
    for (bool graphs : {false, true}) CompareSilu16(label + " others=" + FusionsName(f), o, graphs);
  }
}

TEST(CudaRunnerFusedSilu16, FixturesMatchUnfused) {
  // v3_fp8_tiny: FP8 down projections (K 320 dense, 80 shared) on the in-kernel path (fp8_gemm
  // "kernel", the default): bf16 activations, so the fusion applies.
  for (const char* name : {"v3_tiny", "v2_lite_tiny", "v3_mla512_tiny", "v3_fp8_tiny"}) {
    const std::string dir = DataDir() + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    CudaRunnerOptions o;
    o.model_dir = dir;
    RunVariants(name, o, {Fusions::kDefault, Fusions::kAll, Fusions::kNone});
  }
}

// precise_activations keeps the fp32 SiLU output + hi/lo split: the option must not apply.
TEST(CudaRunnerFusedSilu16, PreciseActivationsKeepsTheSplit) {
  for (const char* name : {"v3_tiny", "v3_fp8_tiny"}) {
    const std::string dir = DataDir() + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    CudaRunnerOptions o;
    o.model_dir = dir;
    o.precise_activations = true;
    CompareSilu16(std::string(name) + " precise", o, false, /*expect_fused=*/0);
  }
}

TEST(CudaRunnerFusedSilu16, DummyV2LiteMatchesUnfused) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  // 1 dense (I 10944) + 1 MoE layer (two shared experts unstacked: I 2816); bf16 weights.
  RunVariants("dummy_v2lite_2layers", DummyOptions(dir, 2, 5), {Fusions::kDefault, Fusions::kAll, Fusions::kNone});
}

TEST(CudaRunnerFusedSilu16, DummyV3MatchesUnfused) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  // 3 dense (FP8, I 18432) + 1 MoE layer (shared expert FP8, I 2048); fp8_gemm "kernel": the
  // down projections read bf16 activations (skinny FP8 kernel at decode sizes).
  RunVariants("dummy_v3_4layers", DummyOptions(dir, 4, 11), {Fusions::kDefault, Fusions::kAll});
}

// fp8_gemm "cublas": the FP8 down projections (K 18432 and 2048, whole 128 blocks) go to
// cuBLASLt's FP8 GEMM, which quantises the fp32 SiLU output to e4m3: no bf16 input to make, so
// the fusion must not apply there (bit-identical either way; where cuBLASLt has no kernel for a
// decode size the in-kernel path, and with it the fusion, is taken: then the count is not
// checked).
TEST(CudaRunnerFusedSilu16, DummyV3CublasFp8KeepsFp32Activations) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CudaRunnerOptions o = DummyOptions(dir, 4, 11);
  o.fp8_gemm = "cublas";
  // Whether every decode-size down projection goes to cuBLASLt (V3: hidden 7168, dense I
  // 18432, one shared expert of I 2048; GemmFp8Supported asks cuBLASLt for a plan, as
  // LinearFwd does).
  const auto all_on_cublas = [] {
    const int64_t Hd = 7168;
    for (int64_t K : {int64_t{18432}, int64_t{2048}})
      for (int64_t M = 1; M <= 16; ++M)
        if (!GemmFp8Supported(M, Hd, K, K, K, Hd, DTypeOut::kF32)) return false;
    return true;
  };
  const bool lt = all_on_cublas();
  std::printf("[fixture] dummy_v3_4layers fp8_gemm=cublas: every decode-size down projection on cuBLASLt: %d\n",
              lt ? 1 : 0);
  for (bool graphs : {false, true}) CompareSilu16("dummy_v3_4layers fp8_gemm=cublas", o, graphs, lt ? 0 : -1);
}

// How many MLPs fuse: every dense layer and every MoE layer's (unstacked) shared experts,
// once per decode-size pass (<= 16 tokens), none in a larger pass. Eager (graphs off), one
// runner, the other fusions at their defaults (fused_moe_shared off).
TEST(CudaRunnerFusedSilu16, EveryMlpOfADecodeSizePass) {
  std::vector<std::pair<std::string, CudaRunnerOptions>> cases;
  for (const char* name : {"v3_tiny", "v2_lite_tiny", "v3_mla512_tiny", "v3_fp8_tiny"}) {
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
    o.fused_silu16 = true;
    auto r = CreateCudaModelRunner(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::unique_ptr<ModelRunner> runner = std::move(r).value();
    const ModelConfig& c = runner->config();
    int64_t mlps = 0;  // MLPs per decode-size pass
    for (int l = 0; l < c.num_hidden_layers; ++l) mlps += !c.is_moe_layer(l) || c.n_shared_experts > 0;
    const std::vector<int64_t> got =
        FusedCountsPerPass(*runner, [](const CudaGraphStats& g) { return g.fused_silu16_mlps; });
    const std::vector<int64_t> want = {mlps, 0, mlps};
    const bool pass = got == want && mlps > 0;
    std::printf("[fixture] %s fused_silu16: fused MLPs per pass %lld / %lld / %lld, expected %lld / 0 / %lld%s\n",
                label.c_str(), got.size() > 0 ? (long long)got[0] : -1LL, got.size() > 1 ? (long long)got[1] : -1LL,
                got.size() > 2 ? (long long)got[2] : -1LL, (long long)mlps, (long long)mlps, pass ? " PASS" : " FAIL");
    EXPECT_EQ(got, want) << label;
    EXPECT_GT(mlps, 0) << label;  // first_k_dense >= 1 in every case
  }
}

}  // namespace
}  // namespace ds::cuda::test
