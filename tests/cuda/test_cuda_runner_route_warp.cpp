// CudaRunnerOptions::moe_route_warp on the whole model: MoE routing by one warp instead of the
// block (MoeRoutingParams::warp_route; every pass, the fused route + permute included). Written
// without a GPU, not yet run on one. Dummy V3 (sigmoid scoring, noaux_tc): the warp form computes
// the block form's values in the same order, so its logits must be bit-identical. Dummy V2-Lite
// (softmax scoring): the sum of the exponentials runs in another fp32 order, so the logits are
// bounded like the other fp32-order options (CompareOptionWithinBounds: cosine >= 0.9999,
// relative L2 <= 1e-2, no non-finite).
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetWarp = [](CudaRunnerOptions& x, bool on) { x.moe_route_warp = on; };

TEST(CudaRunnerRouteWarp, DummyV2LiteWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (bool graphs : {false, true})
    CompareOptionWithinBounds("dummy_v2lite_3layers", "moe_route_warp", DummyOptions(dir, 3, 5), graphs,
                              /*expect_change=*/false, kSetWarp);
}

TEST(CudaRunnerRouteWarp, DummyV3BitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  for (bool graphs : {false, true}) {
    CudaRunnerOptions o = DummyOptions(dir, 4, 11);
    o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
    o.cuda_graphs = graphs;
    std::array<std::unique_ptr<ModelRunner>, 2> runners;
    MakeRunnerPair(o, kSetWarp, &runners);
    ASSERT_TRUE(runners[0] && runners[1]);
    RowDiff d;
    RunFusionSchedule(runners, &d);
    std::printf("[fixture] dummy_v3_4layers moe_route_warp graphs=%d: rows=%lld identical_rows=%lld nonfinite=%lld%s\n",
                graphs ? 1 : 0, (long long)d.rows, (long long)d.identical_rows, (long long)d.nonfinite,
                d.identical_rows == d.rows && d.nonfinite == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(d.identical_rows, d.rows) << "sigmoid routing: the warp form must give the block form's bits";
    EXPECT_EQ(d.nonfinite, 0);
  }
}

}  // namespace
}  // namespace ds::cuda::test
