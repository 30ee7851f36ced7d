// CudaRunnerOptions::fused_gate_up_silu on the whole model: the routed experts' SiLU-and-mul in
// the gate_up GEMM's epilogue (SkinnyGemmParams::silu_pair), which computes SkinnyGemm (fp32) +
// SiluAndMul's bits. Every logit must be bit-identical with it on and off: dummy V2-Lite (bf16
// experts) and dummy V3 (FP8 experts), where the batch-1 gate_up runs on SkinnyGemm (the path
// must run), and the fixtures, CUDA graphs off and on.
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetGateUpSilu = [](CudaRunnerOptions& x, bool on) { x.fused_gate_up_silu = on; };

void CompareBitIdentical(const std::string& label, const CudaRunnerOptions& o, PathExpect expect) {
  CompareOptionBitIdenticalRan(label, "fused_gate_up_silu", o, kSetGateUpSilu, &CudaGraphStats::gate_up_silu_layers,
                               expect);
}

TEST(CudaRunnerGateUpSilu, DummyV2LiteBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareBitIdentical("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), PathExpect::kRuns);
}

TEST(CudaRunnerGateUpSilu, DummyV3BitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareBitIdentical("dummy_v3_4layers", DummyOptions(dir, 4, 11), PathExpect::kRuns);
}

TEST(CudaRunnerGateUpSilu, FixturesBitIdentical) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    CompareBitIdentical(name, o, PathExpect::kAny);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
