// CudaRunnerOptions::skinny_bf16_splitk on the whole model: dense BF16 projections of <= 8 rows
// with fewer 32-row tiles than SMs and K >= 1024 (V2-Lite's kv_a, q_proj, o_proj, W_UK / W_UV
// are batched and stay unsplit) split K on the skinny kernel (host_plans.h, SkinnySplitKWins)
// instead of one block per tile. Same runner otherwise, the same dummy weights;
// RunFusionSchedule (runner_test_util.h: prefills, decode steps of 1..24 sequences, a mixed
// step), graphs off and on. Not bit-identical: the split partials are summed in split order, an
// fp32 order other than one block's; each logits row is bounded like CudaRunnerRouterGemv's
// (cosine >= 0.9999, relative L2 <= 1e-2). Dummy V2-Lite (hidden 2048) must show a change (the
// split ran); nothing may be non-finite.
#include <cstdio>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void CompareSplit(const std::string& label, const CudaRunnerOptions& o, bool graphs, bool expect_change) {
  CompareOptionWithinBounds(label, "skinny_bf16_splitk", o, graphs, expect_change,
                            [](CudaRunnerOptions& x, bool on) { x.skinny_bf16_splitk = on; });
}

TEST(CudaRunnerBf16SplitK, FixturesWithinBounds) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    for (bool graphs : {false, true}) CompareSplit(name, o, graphs, /*expect_change=*/false);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

TEST(CudaRunnerBf16SplitK, DummyV2LiteMatchesUnsplit) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no V2-Lite config";
  for (bool graphs : {false, true}) CompareSplit("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), graphs, true);
}

}  // namespace
}  // namespace ds::cuda::test
