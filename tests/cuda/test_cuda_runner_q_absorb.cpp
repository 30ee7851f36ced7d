// CudaRunnerOptions::fused_q_absorb on the whole model: MLA's query absorption (q_nope W_UK per
// head) in passes of <= 8 absorbed rows runs as one MlaQAbsorb launch (mla_q_absorb.h) instead
// of SplitBf16 + the batched GEMM. The same bf16 inputs, another fp32 summation order, so the
// logits are bounded like the other GEMM-order options (CompareOptionWithinBounds: per row
// cosine >= 0.9999, relative L2 <= 1e-2, no non-finite logits) over RunFusionSchedule
// (prefills, decode steps of 1..24 sequences, a mixed step), CUDA graphs off and on; the path
// must run (q_absorb_layers > 0) and only in the runner with the option:
//  - dummy V2-Lite (16 heads, bf16) and dummy V3 (128 heads, FP8 projections: W_UK stays bf16);
//  - the bf16 fixtures v2_lite_tiny and v3_tiny.
#include <cstdio>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetQAbsorb = [](CudaRunnerOptions& x, bool on) { x.fused_q_absorb = on; };

void CompareBounded(const std::string& label, const CudaRunnerOptions& o, bool expect_change) {
  for (bool graphs : {false, true}) {
    const auto stats = CompareOptionWithinBounds(label, "fused_q_absorb", o, graphs, expect_change, kSetQAbsorb);
    std::printf("[fixture] %s fused_q_absorb graphs=%d: path ran %lld times (off runner %lld)\n", label.c_str(),
                graphs ? 1 : 0, (long long)stats[1].q_absorb_layers, (long long)stats[0].q_absorb_layers);
    EXPECT_EQ(stats[0].q_absorb_layers, 0) << label;
    EXPECT_GT(stats[1].q_absorb_layers, 0) << label << ": did not run";
  }
}

TEST(CudaRunnerQAbsorb, DummyModelsWithinBounds) {
  for (const char* model : {"deepseek-v2-lite", "deepseek-v3"}) {
    const std::string dir = ConfigDir(model);
    if (dir.empty()) continue;
    const bool v3 = std::string(model) == "deepseek-v3";
    CompareBounded(std::string("dummy_") + model, DummyOptions(dir, v3 ? 4 : 3, 7), true);
  }
}

TEST(CudaRunnerQAbsorb, FixturesWithinBounds) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    CompareBounded(name, o, false);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
