// CudaRunnerOptions::gemv_experts_gather on the whole model: at one token, with the fused router +
// routing, the routed gate_up on the grouped GEMV reading the token's row by src_row
// (Fp8GemvGroupedParams::a_rows). The GEMV sums in another fp32 order than SkinnyGemm, so the
// logits are bounded like the other fp32-order options (CompareOptionWithinBounds: cosine >=
// 0.9999, relative L2 <= 1e-2, no non-finite, some row changed) and the GEMV must have run in
// the on runner only: dummy V2-Lite (bf16 experts) and dummy V3 (FP8 experts), graphs off and on.
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetGather = [](CudaRunnerOptions& x, bool on) { x.gemv_experts_gather = on; };

void CompareGather(const std::string& label, const CudaRunnerOptions& o, int64_t CudaGraphStats::*launches) {
  for (bool graphs : {false, true}) {
    const auto stats = CompareOptionWithinBounds(label, "gemv_experts_gather", o, graphs, /*expect_change=*/true,
                                                 kSetGather);
    std::printf("[fixture] %s gemv_experts_gather graphs=%d: expert GEMV launches on %lld, off %lld\n", label.c_str(),
                graphs ? 1 : 0, (long long)(stats[1].*launches), (long long)(stats[0].*launches));
    EXPECT_GT(stats[1].*launches, stats[0].*launches) << label << ": the gathered gate_up GEMV did not run";
  }
}

TEST(CudaRunnerGemvExpertsGather, DummyV2LiteWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareGather("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), &CudaGraphStats::bf16_gemv_expert_launches);
}

TEST(CudaRunnerGemvExpertsGather, DummyV3WithinBounds) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareGather("dummy_v3_4layers", DummyOptions(dir, 4, 11), &CudaGraphStats::fp8_gemv_expert_launches);
}

}  // namespace
}  // namespace ds::cuda::test
