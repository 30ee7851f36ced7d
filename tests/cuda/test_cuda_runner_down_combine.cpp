// CudaRunnerOptions::fused_down_combine on the whole model: the MoE combine + residual + next
// RMSNorm in the last block of the routed experts' down GEMM (SkinnyCombineEpilogue), which
// computes MoeCombineNorm's bits for any block size. Every logit must be bit-identical with it on
// and off, CUDA graphs off and on (with graphs the side branch joins before the down GEMM): dummy
// V2-Lite, where the path must run (CudaGraphStats::down_combine_layers); dummy V3, whose rows of
// 7,168 are too wide for one block (SkinnyCombineFits), so nothing may change; the fixtures.
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetDownCombine = [](CudaRunnerOptions& x, bool on) { x.fused_down_combine = on; };

void CompareBitIdentical(const std::string& label, const CudaRunnerOptions& o, PathExpect expect) {
  CompareOptionBitIdenticalRan(label, "fused_down_combine", o, kSetDownCombine, &CudaGraphStats::down_combine_layers,
                               expect);
}

TEST(CudaRunnerDownCombine, DummyV2LiteBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  // persistent_moe (on by default) takes the one-token MoE layers whole: off here, so the down
  // GEMM's combine epilogue runs on them too.
  CudaRunnerOptions o = DummyOptions(dir, 3, 5);
  o.persistent_moe = false;
  CompareBitIdentical("dummy_v2lite_3layers", o, PathExpect::kRuns);
}

TEST(CudaRunnerDownCombine, DummyV3BitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  // Rows of 7,168 do not fit one block (SkinnyCombineFits): the path must not run.
  CompareBitIdentical("dummy_v3_4layers", DummyOptions(dir, 4, 11), PathExpect::kNever);
}

TEST(CudaRunnerDownCombine, FixturesBitIdentical) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    CompareBitIdentical(name, o, PathExpect::kAny);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
