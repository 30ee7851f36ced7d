// CudaRunnerOptions::fp8_skinny_sm90 on the whole model in the W8A8 numerics (fp8_gemm
// "cublas": e4m3 activations with 1x128 scales): FP8 projections of <= 64 rows on
// Fp8SkinnyGemmSm90 (fp8_gemm_skinny_sm90.h) instead of cuBLASLt. The same products; the K split
// (Fp8SkinnyAutoKsplit, q_a and kv_a) adds its fp32 partials in another order, so the logits are
// bounded like the other GEMM-order options (CompareOptionWithinBounds: per row cosine >= 0.9999,
// relative L2 <= 1e-2, no non-finite logits) over RunFusionSchedule, CUDA graphs off and on; the
// path must run (decode steps and small prefills) and only with the option. Dummy DeepSeek-V3
// (its first 3 layers, FP8 dummy weights) and the v3_fp8_tiny fixture (real FP8 checkpoint
// layout). Written in session 15.
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSet = [](CudaRunnerOptions& x, bool on) { x.fp8_skinny_sm90 = on; };

TEST(CudaRunnerFp8Skinny, DummyV3W8A8WithinBounds) {
  if (!Fp8SkinnyGemmSm90Available()) GTEST_SKIP() << "needs an sm_90 device and a CUTLASS build";
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CudaRunnerOptions o = DummyOptions(dir, 3, 11);
  o.fp8_gemm = "cublas";
  CompareOptionWithinBoundsRan("dummy_v3_3layers_w8a8", "fp8_skinny_sm90", o, /*expect_change=*/false, kSet,
                               &CudaGraphStats::fp8_skinny_sm90_launches, PathExpect::kRuns);
}

TEST(CudaRunnerFp8Skinny, FixtureW8A8WithinBounds) {
  if (!Fp8SkinnyGemmSm90Available()) GTEST_SKIP() << "needs an sm_90 device and a CUTLASS build";
  const int ran = ForEachFixture({"v3_fp8_tiny"}, [](const std::string& name, CudaRunnerOptions o) {
    o.fp8_gemm = "cublas";
    CompareOptionWithinBoundsRan(name + "_w8a8", "fp8_skinny_sm90", o, /*expect_change=*/false, kSet,
                                 &CudaGraphStats::fp8_skinny_sm90_launches, PathExpect::kRuns);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

// The default numerics (fp8_gemm "kernel": bf16 activations) never take it.
TEST(CudaRunnerFp8Skinny, DefaultNumericsNeverRuns) {
  const int ran = ForEachFixture({"v3_fp8_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    CompareOptionWithinBoundsRan(name, "fp8_skinny_sm90", o, /*expect_change=*/false, kSet,
                                 &CudaGraphStats::fp8_skinny_sm90_launches, PathExpect::kNever);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
