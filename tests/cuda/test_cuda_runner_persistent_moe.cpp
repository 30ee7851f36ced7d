// CudaRunnerOptions::persistent_moe on the whole model: the MoE layers of one-token passes run as
// one cooperative launch (moe_persistent.h) instead of the post-attention norm, router, routing,
// expert GEMMs, SiLU, shared-expert branch and combine + norm launches. The norms, the router and
// the experts sum in other fp32 orders, so the logits are bounded like
// the other GEMM-order options (CompareOptionWithinBounds: per row cosine >= 0.9999, relative L2
// <= 1e-2, no non-finite logits) over RunFusionSchedule (prefills, decode steps of 1..24
// sequences, a mixed step; the one-token steps take the path), CUDA graphs off and on:
//  - dummy V2-Lite (bf16 experts and shared experts, 3 layers): the path must run, only there;
//  - dummy V3 (FP8 experts): the kernel does not take FP8, the path must never run and every
//    logit stays bit-identical;
//  - dummy V2-Lite with fused_oproj_norm: o_proj's epilogue applies the post-attention norm, so
//    the kernel takes the non-fold form (x32 / x16 = h32 / h16, read and rewritten in place);
//  - the bf16 fixtures: v2_lite_tiny must take it, v3_tiny does not qualify (its dims).
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetPersistent = [](CudaRunnerOptions& x, bool on) { x.persistent_moe = on; };

// expect_change: some logit must differ (the dummy models; the tiny fixture's sums can come out
// exact in either order).
void CompareBounded(const std::string& label, const CudaRunnerOptions& o, PathExpect expect, bool expect_change) {
  CompareOptionWithinBoundsRan(label, "persistent_moe", o, expect_change, kSetPersistent,
                               &CudaGraphStats::persistent_moe_layers, expect);
}

TEST(CudaRunnerPersistentMoe, DummyV2LiteWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareBounded("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), PathExpect::kRuns, true);
}

TEST(CudaRunnerPersistentMoe, DummyV2LiteAfterOprojNormWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CudaRunnerOptions o = DummyOptions(dir, 3, 5);
  o.fused_oproj_norm = true;
  CompareBounded("dummy_v2lite_3layers oproj_norm", o, PathExpect::kRuns, true);
}

// gu_ksplit (phase 2's split of a gate_up tile over warps, 8 by default) against one warp a tile:
// another fp32 sum order, bounded.
TEST(CudaRunnerPersistentMoe, GateUpKSplitWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.persistent_moe_gu_ksplit = on ? 8 : 1; };
  CompareOptionWithinBoundsRan("dummy_v2lite_3layers", "persistent_moe_gu_ksplit", DummyOptions(dir, 3, 5), true, set,
                               &CudaGraphStats::moe_gu_ksplit_layers, PathExpect::kRuns);
}

// persistent_moe_shared_first: phase 2 with the shared experts' tiles first and no barrier 1: the
// same sums per tile, so bit-identical logits, graphs off and on (MoE and dense layers).
TEST(CudaRunnerPersistentMoe, SharedFirstBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.persistent_moe_shared_first = on; };
  CudaRunnerOptions o = DummyOptions(dir, 3, 5);
  o.moe_ring_dense = false;  // (the dense layer on MoePersistent's dense form, which this option changes)
  CompareOptionBitIdenticalRan("dummy_v2lite_3layers", "persistent_moe_shared_first", o, set,
                               &CudaGraphStats::moe_shared_first_layers, PathExpect::kRuns);
}

// moe_router_tagged (session 31): the specialised kernel's routing warp polls tagged router logits
// instead of a count and then the logits: the same values routed, so bit-identical logits, graphs
// off and on (a graph replays many launches: each launch's tag differs from the last one's).
TEST(CudaRunnerPersistentMoe, RouterTaggedBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.moe_router_tagged = on; };
  CompareOptionBitIdenticalRan("dummy_v2lite_3layers", "moe_router_tagged", DummyOptions(dir, 3, 5), set,
                               &CudaGraphStats::moe_router_tagged_layers, PathExpect::kRuns);
}

// moe_ring (session 32): the MoE layers of one-token passes on MoeRing (the TMA ring) instead of
// MoePersistent's tagged form: the same sums in the same order, so bit-identical logits, graphs off
// and on, in the ring's grid-barrier form (act_tagged off) at 5 stages with 2 producers, 2 with 1,
// 4 with 4 and 6 with 2.
TEST(CudaRunnerPersistentMoe, RingBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (const auto& [stages, producers] : {std::pair{5, 2}, std::pair{2, 1}, std::pair{4, 4}, std::pair{6, 2}}) {
    const auto set = [stages, producers](CudaRunnerOptions& x, bool on) {
      x.moe_ring = on;
      x.moe_ring_act_tagged = false;  // the grid barrier's form (RingActTaggedBitIdentical: the default's)
      x.moe_ring_stages = stages;
      x.moe_ring_producers = producers;
    };
    CompareOptionBitIdenticalRan("dummy_v2lite_3layers stages " + std::to_string(stages) + " producers " +
                                     std::to_string(producers),
                                 "moe_ring", DummyOptions(dir, 3, 5), set, &CudaGraphStats::moe_ring_layers,
                                 PathExpect::kRuns);
  }
}

// moe_ring_act_tagged (session 33; the default): the ring's act by tagged words instead of its grid
// barrier: the same bits as MoePersistent's tagged form (the ring's "off" side), graphs off and on,
// at the default ring form, at 2 stages with 1 producer, and without the act look-ahead; the dense layer
// stays on MoePersistent on both sides (RingDenseWithinBounds covers the ring's dense form).
TEST(CudaRunnerPersistentMoe, RingActTaggedBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (const auto& [stages, producers, lookahead] : {std::tuple{5, 2, true}, std::tuple{2, 1, true}, std::tuple{5, 2, false}}) {
    const auto set = [stages, producers, lookahead](CudaRunnerOptions& x, bool on) {
      x.moe_ring = on;
      x.moe_ring_act_tagged = on;
      x.moe_ring_dense = false;  // (the dense layer on MoePersistent both sides: the ring's dense form has its own order)
      x.moe_ring_act_lookahead = lookahead;
      x.moe_ring_stages = stages;
      x.moe_ring_producers = producers;
    };
    CompareOptionBitIdenticalRan("dummy_v2lite_3layers stages " + std::to_string(stages) + " producers " +
                                     std::to_string(producers) + (lookahead ? "" : " no_lookahead"),
                                 "moe_ring_act_tagged", DummyOptions(dir, 3, 5), set,
                                 &CudaGraphStats::moe_ring_act_tagged_layers, PathExpect::kRuns);
  }
}

// moe_ring_dense (session 34): dummy V2-Lite's dense layer 0 on MoeRing's dense form instead of
// MoePersistent's: another fp32 order of the down sums, so bounded (and some logit must differ),
// graphs off and on, at the default ring form and at 2 stages with 1 producer; it must run.
TEST(CudaRunnerPersistentMoe, RingDenseWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (const auto& [stages, producers] : {std::pair{5, 2}, std::pair{2, 1}}) {
    const auto set = [stages, producers](CudaRunnerOptions& x, bool on) {
      x.moe_ring_dense = on;
      x.moe_ring_stages = stages;
      x.moe_ring_producers = producers;
    };
    CompareOptionWithinBoundsRan("dummy_v2lite_3layers stages " + std::to_string(stages) + " producers " +
                                     std::to_string(producers),
                                 "moe_ring_dense", DummyOptions(dir, 3, 5), true, set,
                                 &CudaGraphStats::moe_ring_dense_layers, PathExpect::kRuns);
  }
}

// persistent_dense_mlp: dummy V2-Lite's dense layer 0 through the kernel's dense form: bounded
// against the unfused dense MLP (another fp32 order), and it must run there; on MoePersistent's dense
// form and on MoeRing's (moe_ring_dense, the default since session 34).
TEST(CudaRunnerPersistentMoe, DenseWithinBounds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (bool ring : {false, true}) {
    const auto set = [](CudaRunnerOptions& x, bool on) { x.persistent_dense_mlp = on; };
    CudaRunnerOptions o = DummyOptions(dir, 3, 5);
    o.moe_ring_dense = ring;
    CompareOptionWithinBoundsRan(std::string("dummy_v2lite_3layers") + (ring ? " ring" : ""), "persistent_dense_mlp", o,
                                 true, set, ring ? &CudaGraphStats::moe_ring_dense_layers : &CudaGraphStats::persistent_dense_layers,
                                 PathExpect::kRuns);
  }
}

// persistent_pdl: both persistent kernels as programmatic dependent launches: the same kernels'
// arithmetic, bit-identical logits, with graphs off and on. The path counter counts only the
// launches the device took with PDL, so a device that refuses the pair of attributes (the
// runner then falls back to plain launches) fails this test (the H200 takes it: session 15 run 1).
TEST(CudaRunnerPersistentMoe, PdlBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  const auto set = [](CudaRunnerOptions& x, bool on) { x.persistent_pdl = on; };
  CompareOptionBitIdenticalRan("dummy_v2lite_3layers", "persistent_pdl", DummyOptions(dir, 3, 5), set,
                               &CudaGraphStats::persistent_pdl_launches, PathExpect::kRuns);
}

TEST(CudaRunnerPersistentMoe, DummyV3Fp8NeverRuns) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareOptionBitIdenticalRan("dummy_v3_4layers", "persistent_moe", DummyOptions(dir, 4, 11), kSetPersistent,
                               &CudaGraphStats::persistent_moe_layers, PathExpect::kNever);
}

TEST(CudaRunnerPersistentMoe, FixturesWithinBounds) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    CompareBounded(name, o, name == "v2_lite_tiny" ? PathExpect::kRuns : PathExpect::kNever, false);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
