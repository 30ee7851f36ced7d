// CudaRunnerOptions::fused_q_absorb on the whole model: MLA's query absorption (q_nope W_UK per
// head) in passes of <= 8 absorbed rows runs as one MlaQAbsorb launch (mla_q_absorb.h) instead
// of SplitBf16 + the batched GEMM. The same bf16 inputs, another fp32 summation order, so the
// logits are bounded like the other GEMM-order options (CompareOptionWithinBounds: per row
// cosine >= 0.9999, relative L2 <= 1e-2, no non-finite logits) over RunFusionSchedule
// (prefills, decode steps of 1..24 sequences, a mixed step), CUDA graphs off and on; the path
// must run (q_absorb_layers > 0) and only in the runner with the option:
//  - dummy V2-Lite (16 heads, bf16) and dummy V3 (128 heads, FP8 projections; W_UK bf16);
//  - the fixtures whose dims it takes (v3_mla512_tiny, v3_fp8_tiny), and two it does not.
// CudaRunner.FixturesMatchGoldenQAbsorb checks the path against transformers' goldens.
#include <cstdio>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetQAbsorb = [](CudaRunnerOptions& x, bool on) { x.fused_q_absorb = on; };

void CompareBounded(const std::string& label, const CudaRunnerOptions& o, bool expect_change, bool expect_run,
                    RowBounds bounds = {}) {
  CompareOptionWithinBoundsRan(label, "fused_q_absorb", o, expect_change, kSetQAbsorb, &CudaGraphStats::q_absorb_layers,
                               expect_run ? PathExpect::kRuns : PathExpect::kNever, bounds);
}

// Dummy V3 with 3 layers (its dense first_k_dense layers): a 4th layer is the first MoE layer,
// whose routing near-ties turn any fp32-order change into rows that move (session 12 run 10:
// min cosine 0.9962 with 4 layers; CudaRunner.DISABLED_GraphDecodeMatchesEagerDummyV3TensorCoreDecode
// says the same of the decode kernels).
TEST(CudaRunnerQAbsorb, DummyModelsWithinBounds) {
  if (const std::string dir = ConfigDir("deepseek-v2-lite"); !dir.empty())
    CompareBounded("dummy_v2lite_3layers", DummyOptions(dir, 3, 7), true, true);
  if (const std::string dir = ConfigDir("deepseek-v3"); !dir.empty())
    CompareBounded("dummy_v3_3layers", DummyOptions(dir, 3, 7), true, true);
}

// The same fp32-order change in the W8A8 numerics (fp8_gemm "cublas": every projection's
// activations re-quantised to e4m3): within kW8A8Bounds (runner_test_util.h; session 15 run 13
// measured min cosine 0.9975, max relative L2 0.070 here, outside the default bounds).
TEST(CudaRunnerQAbsorb, DummyV3W8A8WithinBounds) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CudaRunnerOptions o = DummyOptions(dir, 3, 7);
  o.fp8_gemm = "cublas";
  CompareBounded("dummy_v3_3layers_w8a8", o, true, true, kW8A8Bounds);
}

// The fixtures: v3_mla512_tiny (nope 128, kv_lora 512) and v3_fp8_tiny (32 / 64) take the path;
// v2_lite_tiny (16 / 32) and v3_tiny (24 / 48) do not (nope not a multiple of 32: the path must
// not run there; within the bounds, and bit-identical in session 12 run 11).
TEST(CudaRunnerQAbsorb, FixturesWithinBounds) {
  const int ran = ForEachFixture({"v3_mla512_tiny", "v3_fp8_tiny", "v2_lite_tiny", "v3_tiny"},
                                 [](const std::string& name, const CudaRunnerOptions& o) {
                                   const bool takes = name == "v3_mla512_tiny" || name == "v3_fp8_tiny";
                                   CompareBounded(name, o, false, takes);
                                 });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
