// CudaRunnerOptions::fused_uv on the whole model: in decode-only passes (kv_lora 512, not
// precise_activations, o_proj reading bf16 activations) the MLA decode's final merge applies
// W_UV per head and writes o_proj's bf16 input (MlaDecodeParams::uv_w), instead of the W_UV
// per-head GEMM (HeadGemm) and the SplitBf16 before o_proj. Same bf16 o_lat; W_UV's products are
// summed in another fp32 order than cuBLASLt's and o_h is rounded to bf16 once, so the logits
// are bounded like the other GEMM-order options: per row cosine >= 0.9999, relative L2 <= 1e-2,
// no non-finite logits (RowDiff over RunFusionSchedule, runner_test_util.h: prefills, decode
// steps of 1..24 sequences, a mixed step), graphs off and on; the test also reports how many
// rows came out bit-identical.
//  - The small fixtures (v2_lite_tiny, v3_tiny, v3_fp8_tiny: kv_lora 32 / 48 / 64) do not
//    qualify (kv_lora != 512): whatever fused_uv_layers the on runner reports is printed, only
//    the bounds are required, and where the epilogue never ran the logits must be bit-identical.
//  - v3_mla512_tiny (V3's MLA dims, 3 heads) and the dummy V2-Lite (16 heads, 3 layers) and
//    V3 (128 heads, 4 layers) models qualify: the on runner must report fused_uv_layers > 0.
//    The dummy models also run with another decode kernel (V2-Lite: the CUDA-core kernel,
//    tensor cores off; V3: the tensor-core row-tile kernel, sm90 off) besides the default.
// The off runner never takes the path (fused_uv_layers == 0). Passing on the H200 since session 8
// (fused_uv on by default).
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// expect_fused: 1 = the on runner must have run the epilogue, 0 = must not, -1 = either
// (reported; bit-identical logits required when it did not).
void CompareUv(const std::string& label, CudaRunnerOptions o, bool graphs, int expect_fused) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: W_UV GEMM, 1: the decode's W_UV epilogue
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.fused_uv = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  RowDiff d;
  RunFusionSchedule(runners, &d);
  const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
  const bool ran = g1.fused_uv_layers > 0;
  const bool fused_ok = expect_fused < 0 || (expect_fused == 1) == ran;
  const bool identical_ok = ran || d.identical_rows == d.rows;
  const bool pass = d.nonfinite == 0 && d.min_cos >= 0.9999 && d.max_rel <= 1e-2 && fused_ok && identical_ok &&
                    g0.fused_uv_layers == 0;
  std::printf("[fixture] %s fused_uv graphs=%d: rows=%lld min_cos=%.7f max_rel_l2=%.3e (row %lld; %lld rows over "
              "1e-3) identical_rows=%lld%s nonfinite=%lld replayed=%lld uv_layers=%lld (off runner %lld; %s)%s\n",
              label.c_str(), graphs ? 1 : 0, (long long)d.rows, d.min_cos, d.max_rel, (long long)d.worst_row,
              (long long)d.rows_rel_over_1e3, (long long)d.identical_rows,
              d.identical_rows == d.rows ? " (bit-identical)" : "", (long long)d.nonfinite, (long long)g1.replayed,
              (long long)g1.fused_uv_layers, (long long)g0.fused_uv_layers,
              expect_fused < 0 ? "either expected" : expect_fused ? "expected > 0" : "expected 0",
              pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_GE(d.min_cos, 0.9999) << label;
  EXPECT_LE(d.max_rel, 1e-2) << label;
  if (expect_fused == 1) { EXPECT_GT(g1.fused_uv_layers, 0) << label << ": the W_UV epilogue never ran"; }
  if (expect_fused == 0) { EXPECT_EQ(g1.fused_uv_layers, 0) << label << ": the W_UV epilogue ran where it must not"; }
  if (!ran) { EXPECT_EQ(d.identical_rows, d.rows) << label << ": logits changed though the epilogue never ran"; }
  EXPECT_EQ(g0.fused_uv_layers, 0) << label;
}

TEST(CudaRunnerFusedUv, FixturesWithinBounds) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny", "v3_fp8_tiny"},
                                 [](const std::string& name, const CudaRunnerOptions& o) {
                                   for (bool graphs : {false, true}) CompareUv(name, o, graphs, -1);
                                 });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

// V3's MLA dims (kv_lora 512, nope 128, v 128) with 3 heads: the epilogue must run.
TEST(CudaRunnerFusedUv, Mla512FixtureWithinBounds) {
  const std::string dir = DataDir() + "/v3_mla512_tiny";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  CudaRunnerOptions o;
  o.model_dir = dir;
  for (bool graphs : {false, true}) CompareUv("v3_mla512_tiny", o, graphs, 1);
  // precise_activations keeps the W_UV GEMM (the option must not apply; bit-identical).
  o.precise_activations = true;
  CompareUv("v3_mla512_tiny precise", o, false, 0);
}

TEST(CudaRunnerFusedUv, DummyV2LiteWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (bool graphs : {false, true}) CompareUv("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), graphs, 1);
  CudaRunnerOptions o = DummyOptions(dir, 3, 5);
  o.mla_decode_tensor_cores = false;  // the CUDA-core decode kernel + combine
  for (bool graphs : {false, true}) CompareUv("dummy_v2lite_3layers cudacore", o, graphs, 1);
}

// Information check (disabled; run with --gtest_also_run_disabled_tests): the same comparison
// with SkinnyGemm taking V2-Lite's q and shared experts (skinny_bf16_max_weights 12 Mi), which
// pushed it past its bounds in session 10 run 9 (max relative L2 1.7e-2). The per-row report
// (how many rows moved past 1e-3, and which) tells a routing flip from a uniform loss.
TEST(CudaRunnerFusedUv, DISABLED_DummyV2LiteSkinny12MiReport) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CudaRunnerOptions o = DummyOptions(dir, 3, 5);
  o.skinny_bf16_max_weights = int64_t{12} << 20;
  CompareUv("dummy_v2lite_3layers skinny12Mi", o, false, 1);
}

// Dummy V3 with its 3 dense layers only (128 heads: the sm_90a decode kernel by default on an
// sm_90 device, and the tensor-core row-tile kernel). With the 4th (MoE) layer the dummy model
// turns fp32-order changes into routing flips: session 8 run 5 measured min cosine 0.99647 for
// uv on vs off there, the same as the existing floor of two equally valid decode kernels on that
// model (CudaRunner tc_vs_emulation on dummy_v3_4layers: 0.99657 in the same run), so the MoE
// layer is left to the op tests (CudaMlaDecodeUv.*) and the V2-Lite / fixture comparisons.
TEST(CudaRunnerFusedUv, DummyV3WithinBounds) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  for (bool graphs : {false, true}) CompareUv("dummy_v3_3layers", DummyOptions(dir, 3, 11), graphs, 1);
  CudaRunnerOptions o = DummyOptions(dir, 3, 11);
  o.mla_decode_sm90 = false;  // the tensor-core row-tile kernel
  for (bool graphs : {false, true}) CompareUv("dummy_v3_3layers tc", o, graphs, 1);
}

// mla_uv_preload (session 29): the W_UV merge kernel's first rows loaded before its merge: the
// same values and sums, so bit-identical logits, graphs off and on; it must run (dummy V3's 3
// dense layers: the sm_90a decode kernel's splits merged by MlaDecodeCombineUvKernel).
TEST(CudaRunnerFusedUv, UvPreloadBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.mla_uv_preload = on; };
  CompareOptionBitIdenticalRan("dummy_v3_3layers", "mla_uv_preload", DummyOptions(dir, 3, 11), set,
                               &CudaGraphStats::mla_uv_preload_layers, PathExpect::kRuns);
}

}  // namespace
}  // namespace ds::cuda::test
