// CudaRunnerOptions::attn_persistent on the whole model: the attention layer of every one-token,
// one-sequence decode pass runs as one MlaAttnPersistent launch (mla_attn_persistent.h) instead
// of the unfused chain (q_proj, kv_a, kv norm + RoPE + cache write, q absorption, split-KV decode,
// merge + W_UV, o_proj). Other fp32 orders and the probabilities rounded to bf16 per 32-key
// split, so the logits are bounded like the other GEMM-order options (CompareOptionWithinBounds:
// per row cosine >= 0.9999, relative L2 <= 1e-2, no non-finite logits) over RunFusionSchedule
// (prefills, decode steps of 1..24 sequences, a mixed step), CUDA graphs off and on. The path
// must run (the batch-1 decode steps) and only in the runner with the option: dummy V2-Lite, 3
// layers (its MLA dims: 16 heads, no q_lora, bf16). The fixtures' dims do not qualify (q_lora or
// small heads): they must stay on the unfused path. First run: session 13 (run 1).
#include <cstdio>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetAttn = [](CudaRunnerOptions& x, bool on) { x.attn_persistent = on; };

void CompareBounded(const std::string& label, const CudaRunnerOptions& o, bool expect_change, PathExpect expect) {
  CompareOptionWithinBoundsRan(label, "attn_persistent", o, expect_change, kSetAttn, &CudaGraphStats::attn_persistent_layers,
                               expect);
}

TEST(CudaRunnerAttnPersistent, DummyV2LiteWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareBounded("dummy_v2lite_3layers", DummyOptions(dir, 3, 9), true, PathExpect::kRuns);
}

// norm_in_attn: each MoE kernel but the last leaves the next layer's input norm to that layer's
// attention kernel (another fp32 sum order of the norm): bounded against the option off, and it
// must run on dummy V2-Lite (layers 1 -> 2: the MoE of layer 1, then the attention of layer 2).
// No row need differ: the norm's only consumer is its bf16 copy, which another fp32 sum order
// changes only where an element lies within an fp32 ulp of a bf16 rounding boundary (session 14
// run 3: bit-identical on all 152 rows); the op test (CudaMlaAttnPersistent.InputNormMatches-
// CpuReference) checks the norm itself.
TEST(CudaRunnerAttnPersistent, NormInAttnWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.norm_in_attn = on; };
  // (The MoE -> attention hand-off itself: layer 0's norm alone would also count in
  // norm_in_attn_layers.)
  CompareOptionWithinBoundsRan("dummy_v2lite_3layers", "norm_in_attn", DummyOptions(dir, 3, 9), /*expect_change=*/false,
                               set, &CudaGraphStats::moe_norm_skipped_layers, PathExpect::kRuns);
}

// attn_absorb_overlap: the absorption overlapping phase 1's tail (MlaAttnPersistentParams::
// nope_ready): the same rows by the same warps' sums, so bit-identical logits, graphs off and on.
TEST(CudaRunnerAttnPersistent, AbsorbOverlapBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.attn_absorb_overlap = on; };
  CompareOptionBitIdenticalRan("dummy_v2lite_3layers", "attn_absorb_overlap", DummyOptions(dir, 3, 9), set,
                               &CudaGraphStats::attn_absorb_overlap_layers, PathExpect::kRuns);
}

// attn_split_counter: the decode blocks start on a counter instead of barrier 2: the same bits.
TEST(CudaRunnerAttnPersistent, SplitCounterBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.attn_split_counter = on; };
  CompareOptionBitIdenticalRan("dummy_v2lite_3layers", "attn_split_counter", DummyOptions(dir, 3, 9), set,
                               &CudaGraphStats::attn_split_counter_layers, PathExpect::kRuns);
}

// attn_wo_stage_point 3 to 6: the o_proj tile staged in phase 3 instead of phase 4: the same
// tile, the same sums, bit-identical logits.
TEST(CudaRunnerAttnPersistent, WoStageBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (const int point : {3, 4, 5, 6}) {
    const auto set = [point](CudaRunnerOptions& x, bool on) { x.attn_wo_stage_point = on ? point : 2; };
    const std::string name = "attn_wo_stage_point=" + std::to_string(point);
    CompareOptionBitIdenticalRan("dummy_v2lite_3layers", name.c_str(), DummyOptions(dir, 3, 9), set,
                                 &CudaGraphStats::attn_wo_stage_early_layers, PathExpect::kRuns);
  }
}

// attn_merge_cols_min_splits: phase 4's column-split merge (MlaAttnPersistentParams::head_ready)
// at every context (1 split and up): another fp32 order of the merge's sums where a context has
// more than one split, so bounded against the one-loop merge (no row need differ: the schedule's
// batch-1 contexts are short), and it must run.
TEST(CudaRunnerAttnPersistent, MergeColsWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.attn_merge_cols_min_splits = on ? 1 : 0; };
  CompareOptionWithinBoundsRan("dummy_v2lite_3layers", "attn_merge_cols_min_splits=1", DummyOptions(dir, 3, 9),
                               /*expect_change=*/false, set, &CudaGraphStats::attn_merge_cols_layers, PathExpect::kRuns);
}

// attn_specialize / moe_specialize at levels 1 and 2 (the kernel's runner-form instantiation, with
// V2-Lite's shapes at 2) against 0 (the generic kernel), one kernel at a time: the same bits.
void CompareSpecializeLevels(const char* option, int CudaRunnerOptions::*level_field, int64_t CudaGraphStats::*ran) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (const int level : {1, 2}) {
    const auto set = [level, level_field](CudaRunnerOptions& x, bool on) { x.*level_field = on ? level : 0; };
    const std::string name = std::string(option) + "=" + std::to_string(level);
    CudaRunnerOptions o = DummyOptions(dir, 3, 9);
    o.moe_ring_dense = false;  // (moe_specialize: the dense layer on MoePersistent, whose instantiation it picks)
    CompareOptionBitIdenticalRan("dummy_v2lite_3layers", name.c_str(), o, set, ran, PathExpect::kRuns);
  }
}

TEST(CudaRunnerAttnPersistent, SpecializeBitIdentical) {
  CompareSpecializeLevels("attn_specialize", &CudaRunnerOptions::attn_specialize, &CudaGraphStats::attn_specialized_layers);
}

TEST(CudaRunnerAttnPersistent, MoeSpecializeBitIdentical) {
  CompareSpecializeLevels("moe_specialize", &CudaRunnerOptions::moe_specialize, &CudaGraphStats::moe_specialized_layers);
}

// persistent_carveout (72 by default since session 25) against the driver's choice: a launch
// attribute only, so the same bits.
TEST(CudaRunnerAttnPersistent, CarveoutBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.persistent_carveout = on ? 72 : -1; };
  CompareOptionBitIdenticalRan("dummy_v2lite_3layers", "persistent_carveout", DummyOptions(dir, 3, 9), set,
                               &CudaGraphStats::persistent_carveout_launches, PathExpect::kRuns);
}

// moe_carveout (58 by default since session 27) against persistent_carveout's 72 for the MoE kernel
// too: a launch attribute only, so the same bits, graphs off and on (both runners launch with a
// preference, so no path counter to tell them apart).
TEST(CudaRunnerAttnPersistent, MoeCarveoutBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (bool graphs : {false, true}) {
    CompareOptionBitIdentical("dummy_v2lite_3layers", "moe_carveout", DummyOptions(dir, 3, 9), graphs,
                              [](CudaRunnerOptions& x, bool on) { x.moe_carveout = on ? 58 : -2; });
  }
}

// The persistent kernels' weight loads with an L2 fetch size (attn_l2_fetch, moe_l2_fetch: 128
// bytes, the default, and 256), each kernel on its own: the same loads, so the same bits. (The MoE
// layers on MoePersistent, not MoeRing, whose copies have no fetch size: moe_ring off.)
TEST(CudaRunnerAttnPersistent, L2FetchBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (const int size : {1, 2}) {
    const auto set_attn = [size](CudaRunnerOptions& x, bool on) {
      x.attn_l2_fetch = on ? size : 0;
      x.moe_l2_fetch = 0;
    };
    const auto set_moe = [size](CudaRunnerOptions& x, bool on) {
      x.attn_l2_fetch = 0;
      x.moe_l2_fetch = on ? size : 0;
      x.moe_ring = false;
    };
    const std::string attn = "attn_l2_fetch=" + std::to_string(size), moe = "moe_l2_fetch=" + std::to_string(size);
    CompareOptionBitIdenticalRan("dummy_v2lite_3layers", attn.c_str(), DummyOptions(dir, 3, 9), set_attn,
                                 &CudaGraphStats::attn_l2_fetch_layers, PathExpect::kRuns);
    CompareOptionBitIdenticalRan("dummy_v2lite_3layers", moe.c_str(), DummyOptions(dir, 3, 9), set_moe,
                                 &CudaGraphStats::moe_l2_fetch_layers, PathExpect::kRuns);
  }
}

TEST(CudaRunnerAttnPersistent, FixturesStayUnfused) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_mla512_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    CompareBounded(name, o, false, PathExpect::kNever);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
