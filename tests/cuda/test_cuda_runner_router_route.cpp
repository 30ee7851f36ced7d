// CudaRunnerOptions::fused_router_route on the whole model: the router GEMV, the routing and the
// permutation metadata in one launch (moe_router_route.h), with the routed gate_up GEMM reading
// the token rows by src_row (GroupedGemmParams::a_rows) instead of MoeRoutePermute's copies. It
// computes the values of RouterGemv + MoeRoutePermute (warp routing form, the default) in the
// same order, and the gathered rows hold the copied rows' bits, so every logit must be
// bit-identical with it on and off: dummy V2-Lite (softmax, greedy) and dummy V3 (sigmoid,
// noaux_tc), the decode fusions at their defaults and all on, CUDA graphs off and on. The path
// must run (CudaGraphStats::router_route_layers) with the default fusions.
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetRouterRoute = [](CudaRunnerOptions& x, bool on) { x.fused_router_route = on; };

// Defaults and all fusions (with all, the shared experts are stacked and the option does not
// apply), graphs off and on; with the default fusions the fused path must run.
void CompareBitIdentical(const std::string& label, const CudaRunnerOptions& o) {
  for (Fusions f : {Fusions::kDefault, Fusions::kAll})
    for (bool graphs : {false, true}) {
      CudaRunnerOptions oi = o;
      SetFusions(f, &oi);
      const auto stats = CompareOptionBitIdentical(label + " fusions=" + FusionsName(f), "fused_router_route", oi,
                                                   graphs, kSetRouterRoute);
      std::printf("[fixture] %s fusions=%s graphs=%d: router_route_layers=%lld (off runner %lld)\n", label.c_str(),
                  FusionsName(f), graphs ? 1 : 0, (long long)stats[1].router_route_layers,
                  (long long)stats[0].router_route_layers);
      EXPECT_EQ(stats[0].router_route_layers, 0) << label;
      if (f == Fusions::kDefault) { EXPECT_GT(stats[1].router_route_layers, 0) << label << ": fused_router_route did not run"; }
    }
}

TEST(CudaRunnerRouterRoute, DummyV2LiteBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareBitIdentical("dummy_v2lite_3layers", DummyOptions(dir, 3, 5));
}

TEST(CudaRunnerRouterRoute, DummyV3BitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareBitIdentical("dummy_v3_4layers", DummyOptions(dir, 4, 11));
}

// router_route_fast (session 30): one token routed in registers, against the warp form, bit for bit
// (dummy V3, 4 layers: its MoE layer routes through the fused launch, and the schedule's
// one-sequence decode steps take the fast form; its path counter must count), graphs off and on.
TEST(CudaRunnerRouterRoute, DummyV3FastRouteBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareOptionBitIdenticalRan("dummy_v3_4layers", "router_route_fast", DummyOptions(dir, 4, 11),
                               [](CudaRunnerOptions& x, bool on) { x.router_route_fast = on; },
                               &CudaGraphStats::router_route_fast_layers, PathExpect::kRuns);
}

}  // namespace
}  // namespace ds::cuda::test
