// CudaRunnerOptions::fused_down_combine on the whole model: the MoE combine + residual + next
// RMSNorm in the last block of the routed experts' down GEMM (SkinnyCombineEpilogue), which
// computes MoeCombineNorm's bits for any block size. Every logit must be bit-identical with it on
// and off, CUDA graphs off and on (with graphs the side branch joins before the down GEMM): dummy
// V2-Lite, where the path must run (CudaGraphStats::down_combine_layers); dummy V3, whose rows of
// 7,168 are too wide for one block (SkinnyCombineFits), so nothing may change; the fixtures. And
// combine_norm_split (below), which also routes the residual-form RmsNorms of those passes.
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

namespace ds::cuda::test {
namespace {

// CudaRunnerOptions::combine_norm_split (session 29): the MoeCombineNorm launch with each token's
// row over G blocks (MoeCombineNormParams::split_blocks) computes the one-block kernel's bits, so
// every logit must be bit-identical with it on and off, graphs off and on: dummy V3 (4 layers,
// its MoE layer's rows of 7,168 over 8 blocks; its post-attention and dense-layer norms, the
// residual-form RmsNorms, through the same launch with no experts) and dummy V2-Lite (the
// multi-token decode steps, which the persistent MoE kernel does not take); the path must run on
// both.
TEST(CudaRunnerCombineNormSplit, DummyModelsBitIdentical) {
  // (combine_norm_split_min_hidden 0: V2-Lite's rows of 2,048 take it too, as the option's default
  // does not.)
  const auto set = [](CudaRunnerOptions& x, bool on) {
    x.combine_norm_split = on ? 8 : 0;
    x.combine_norm_split_min_hidden = 0;
  };
  const std::string v3 = ConfigDir("deepseek-v3");
  if (!v3.empty())
    CompareOptionBitIdenticalRan("dummy_v3_4layers", "combine_norm_split=8", DummyOptions(v3, 4, 11), set,
                                 &CudaGraphStats::combine_norm_split_layers, PathExpect::kRuns);
  const std::string v2 = ConfigDir("deepseek-v2-lite");
  if (!v2.empty())
    CompareOptionBitIdenticalRan("dummy_v2lite_3layers", "combine_norm_split=8", DummyOptions(v2, 3, 5), set,
                                 &CudaGraphStats::combine_norm_split_layers, PathExpect::kRuns);
  if (v3.empty() && v2.empty()) GTEST_SKIP() << "no deepseek-v3 / deepseek-v2-lite config";
}

}  // namespace
}  // namespace ds::cuda::test
