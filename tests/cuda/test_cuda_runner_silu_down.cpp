// CudaRunnerOptions::fused_silu_down on the whole model: the routed experts' SiLU-and-mul folded
// into the down GEMM's activation loads (SkinnyGemm, GroupedGemmParams::a_gate_up). The loads
// compute SiluAndMul's bf16 values, so every logit must be bit-identical with it on and off:
// dummy V2-Lite (bf16 experts) and dummy V3 (FP8 experts; at 2-8 tokens their down GEMM is the
// grouped GEMV, where the option does not apply), the decode fusions at their defaults and all
// on, CUDA graphs off and on. The path must run with the default fusions
// (CudaGraphStats::silu_down_layers).
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetSiluDown = [](CudaRunnerOptions& x, bool on) { x.fused_silu_down = on; };

void CompareBitIdentical(const std::string& label, CudaRunnerOptions o) {
  for (Fusions f : {Fusions::kDefault, Fusions::kAll})
    for (bool graphs : {false, true}) {
      CudaRunnerOptions oi = o;
      SetFusions(f, &oi);
      oi.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
      oi.cuda_graphs = graphs;
      std::array<std::unique_ptr<ModelRunner>, 2> runners;
      MakeRunnerPair(oi, kSetSiluDown, &runners);
      ASSERT_TRUE(runners[0] && runners[1]);
      RowDiff d;
      RunFusionSchedule(runners, &d);
      const int64_t ran = GetCudaGraphStats(*runners[1]).silu_down_layers;
      const int64_t ran_off = GetCudaGraphStats(*runners[0]).silu_down_layers;
      const bool ok = d.identical_rows == d.rows && d.nonfinite == 0 && ran_off == 0 && ran > 0;
      std::printf("[fixture] %s fused_silu_down fusions=%s graphs=%d: rows=%lld identical_rows=%lld nonfinite=%lld "
                  "silu_down_layers=%lld%s\n",
                  label.c_str(), FusionsName(f), graphs ? 1 : 0, (long long)d.rows, (long long)d.identical_rows,
                  (long long)d.nonfinite, (long long)ran, ok ? " PASS" : " FAIL");
      EXPECT_EQ(d.identical_rows, d.rows) << label << ": SiLU in the down GEMM's loads must give SiluAndMul's bits";
      EXPECT_EQ(d.nonfinite, 0) << label;
      EXPECT_EQ(ran_off, 0) << label;
      EXPECT_GT(ran, 0) << label << ": fused_silu_down did not run";
    }
}

TEST(CudaRunnerSiluDown, DummyV2LiteBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareBitIdentical("dummy_v2lite_3layers", DummyOptions(dir, 3, 5));
}

TEST(CudaRunnerSiluDown, DummyV3BitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareBitIdentical("dummy_v3_4layers", DummyOptions(dir, 4, 11));
}

}  // namespace
}  // namespace ds::cuda::test
