// CudaRunnerOptions::router_gemv on the whole model: the MoE router logits of passes of <= 16
// tokens on RouterGemv (router_gemv.h) instead of cuBLASLt's fp32 GEMM. Same runner options
// otherwise, the same dummy weights; RunFusionSchedule (runner_test_util.h: a 9-token prefill
// (RouterGemv in the on runner), a prefill of 20-219-token sequences (cuBLASLt in both), decode
// steps of 1..24 sequences (24: cuBLASLt in both), a mixed 7-token step), graphs off and on.
// Not bit-identical: the router logits differ by fp32 summation order (~1e-7 relative); the
// routing only changes where two experts' scores are that close, and the bf16 activations
// between layers carry the rest, so each row is bounded like CudaRunnerFp8Gemv's: cosine >=
// 0.9999, relative L2 <= 1e-2 (a wrong router row or column would move whole experts). The
// runner must have changed some logits on the dummy models (the path ran) and none may be
// non-finite. Session 7 run 4 (H200): dummy V2-Lite min cosine 0.9999981 (138 of 152 rows
// bit-identical), dummy V3 1.0000000 (145-146 identical), the fixtures bit-identical (which
// the first version of this test wrongly required to differ).
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

// expect_change: the dummy models (hidden 2048 / 7168) must show some change (the path ran);
// the fixtures came out bit-identical on the H200 (session 7 run 4: their small routers' sums
// happen to round alike), so there only the bounds apply.
void CompareRouter(const std::string& label, CudaRunnerOptions o, bool graphs, bool expect_change) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: cuBLASLt router, 1: RouterGemv
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.router_gemv = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  RowDiff d;
  RunFusionSchedule(runners, &d);
  const bool changed_ok = !expect_change || d.identical_rows < d.rows;
  const bool pass = d.nonfinite == 0 && d.min_cos >= 0.9999 && d.max_rel <= 1e-2 && changed_ok;
  std::printf("[fixture] %s router_gemv graphs=%d: rows=%lld min_cos=%.7f max_rel_l2=%.3e identical_rows=%lld "
              "nonfinite=%lld%s\n",
              label.c_str(), graphs ? 1 : 0, (long long)d.rows, d.min_cos, d.max_rel, (long long)d.identical_rows,
              (long long)d.nonfinite, pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_GE(d.min_cos, 0.9999) << label;
  EXPECT_LE(d.max_rel, 1e-2) << label;
  if (expect_change) { EXPECT_LT(d.identical_rows, d.rows) << label << ": the router path made no difference (did it run?)"; }
}

TEST(CudaRunnerRouterGemv, FixturesMatchCublasRouter) {
  const int ran = ForEachFixture({"v3_tiny", "v2_lite_tiny", "v3_fp8_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    for (bool graphs : {false, true}) CompareRouter(name, o, graphs, /*expect_change=*/false);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

TEST(CudaRunnerRouterGemv, DummyModelsMatchCublasRouter) {
  if (const std::string dir = ConfigDir("deepseek-v2-lite"); !dir.empty())
    for (bool graphs : {false, true}) CompareRouter("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), graphs, true);
  if (const std::string dir = ConfigDir("deepseek-v3"); !dir.empty())
    for (bool graphs : {false, true}) CompareRouter("dummy_v3_4layers", DummyOptions(dir, 4, 11), graphs, true);
}

}  // namespace
}  // namespace ds::cuda::test
