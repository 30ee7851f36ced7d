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
void CompareRouter(const std::string& label, const CudaRunnerOptions& o, bool graphs, bool expect_change) {
  CompareOptionWithinBounds(label, "router_gemv", o, graphs, expect_change,
                            [](CudaRunnerOptions& x, bool on) { x.router_gemv = on; });
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
