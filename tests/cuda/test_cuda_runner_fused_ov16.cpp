// CudaRunnerOptions::fused_ov16 on the whole model: in decode-only passes the W_UV per-head GEMM
// writes o_h as bf16 (cuBLASLt's bf16 output type) and o_proj reads it directly, instead of
// an fp32 o_h that LinearFwd rounds to bf16 (SplitBf16). Same runner options otherwise, the same
// dummy weights; RunFusionSchedule (runner_test_util.h: prefills, decode steps of 1..24
// sequences, a mixed step), graphs off and on. cuBLASLt's bf16 output equals the RN rounding of
// its fp32 result when it runs the same algorithm for both output types; that is not documented,
// so the rows are bounded like the other GEMM-order options (cosine >= 0.9999, relative L2 <=
// 1e-2, no non-finite logits) and the test reports whether they came out bit-identical. The on
// runner must have taken the path (fused_ov16_layers > 0; 0 in the off runner).
#include <cstdio>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void CompareOv16(const std::string& label, CudaRunnerOptions o, bool graphs) {
  o.fused_uv = false;  // fused_uv (on by default) takes precedence over ov16
  const auto stats = CompareOptionWithinBounds(label, "fused_ov16", o, graphs, /*expect_change=*/false,
                                               [](CudaRunnerOptions& x, bool on) { x.fused_ov16 = on; });
  std::printf("[fixture] %s fused_ov16 graphs=%d: ov16_layers=%lld (off runner %lld)\n", label.c_str(), graphs ? 1 : 0,
              (long long)stats[1].fused_ov16_layers, (long long)stats[0].fused_ov16_layers);
  EXPECT_GT(stats[1].fused_ov16_layers, 0) << label << ": the bf16 o_h path never ran";
  EXPECT_EQ(stats[0].fused_ov16_layers, 0) << label;
}

TEST(CudaRunnerFusedOv16, FixturesWithinBounds) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny", "v3_fp8_tiny"},
                                 [](const std::string& name, const CudaRunnerOptions& o) {
                                   for (bool graphs : {false, true}) CompareOv16(name, o, graphs);
                                 });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

TEST(CudaRunnerFusedOv16, DummyModelsWithinBounds) {
  if (const std::string dir = ConfigDir("deepseek-v2-lite"); !dir.empty())
    for (bool graphs : {false, true}) CompareOv16("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), graphs);
  if (const std::string dir = ConfigDir("deepseek-v3"); !dir.empty())
    for (bool graphs : {false, true}) CompareOv16("dummy_v3_4layers", DummyOptions(dir, 4, 11), graphs);
}

}  // namespace
}  // namespace ds::cuda::test
