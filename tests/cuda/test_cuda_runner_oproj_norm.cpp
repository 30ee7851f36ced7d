// CudaRunnerOptions::fused_oproj_norm on the whole model: the residual add + post-attention
// RMSNorm in the last block of o_proj (SkinnyGemm's plain kernel, the norm-only combine
// epilogue), which computes RmsNorm's bits. Every logit must be bit-identical with it on and
// off: dummy V2-Lite (bf16 o_proj on SkinnyGemm: the path must run), dummy V3 (FP8 o_proj on the
// TMA GEMV: the path does not apply) and the fixtures, CUDA graphs off and on.
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetOprojNorm = [](CudaRunnerOptions& x, bool on) { x.fused_oproj_norm = on; };

void CompareBitIdentical(const std::string& label, const CudaRunnerOptions& o, PathExpect expect) {
  CompareOptionBitIdenticalRan(label, "fused_oproj_norm", o, kSetOprojNorm, &CudaGraphStats::oproj_norm_layers, expect);
}

TEST(CudaRunnerOprojNorm, DummyV2LiteBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareBitIdentical("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), PathExpect::kRuns);
}

TEST(CudaRunnerOprojNorm, DummyV3BitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareBitIdentical("dummy_v3_4layers", DummyOptions(dir, 4, 11), PathExpect::kNever);
}

TEST(CudaRunnerOprojNorm, FixturesBitIdentical) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    CompareBitIdentical(name, o, PathExpect::kAny);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
