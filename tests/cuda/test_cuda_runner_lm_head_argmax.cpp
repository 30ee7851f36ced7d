// CudaRunnerOptions::lm_head_argmax on the whole model (dummy V2-Lite, 3 layers: hidden 2,048,
// vocab 102,400): passes of one logits row (one-row decode graphs, and eager passes) run the LM
// head (and, in graphs, the greedy argmax) as one LmHeadArgmax launch. Its fp32 summation order
// differs from cuBLASLt's and nothing else changes, so the logits of every pass are bounded
// tightly (relative L2 <= 1e-4 a row, RowDiff over RunFusionSchedule, graphs off and on), and
// greedy one-row decode steps (in graphs: the ids from the fused kernel) give the same ids as
// without it. The fixtures (hidden < 256) never take the path.
#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

TEST(CudaRunnerLmHeadArgmax, DummyV2LiteWithinBoundsAndSameIds) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  for (const bool graphs : {false, true}) {
    CudaRunnerOptions o = DummyOptions(dir, 3, 5);
    o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
    o.cuda_graphs = graphs;
    std::array<std::unique_ptr<ModelRunner>, 2> runners;
    MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.lm_head_argmax = on; }, &runners);
    ASSERT_TRUE(runners[0] && runners[1]);
    RowDiff d;
    RunFusionSchedule(runners, &d);
    // Greedy one-row decode steps of sequence 0 after a fresh prefill of it (40 tokens), ids
    // compared.
    const int64_t V = runners[0]->config().vocab_size;
    std::vector<int> ctx(kFusionSeqs, 0);
    ctx[0] = 40;
    auto token = [&](int s, int p) { return static_cast<int32_t>((int64_t{s} * 7919 + int64_t{p} * 104729 + 3) % V); };
    {
      const ForwardBatch pre = PrefillBatch({ctx[0]}, kFusionMaxBlocks, token);
      std::array<ForwardOutput, 2> out;
      for (int i = 0; i < 2; ++i) ASSERT_TRUE(runners[i]->Forward(pre, &out[i]).ok());
    }
    int64_t id_mismatch = 0, steps = 0;
    for (int step = 0; step < 6; ++step, ++steps) {
      ForwardBatch b = DecodeBatch({0}, ctx, kFusionMaxBlocks, token);
      RowSampling greedy;
      greedy.temperature = 0.f;
      b.sampling = {greedy};
      std::array<ForwardOutput, 2> out;
      for (int i = 0; i < 2; ++i) ASSERT_TRUE(runners[i]->Forward(b, &out[i]).ok());
      id_mismatch += out[0].token_ids[0] != out[1].token_ids[0];
      ++ctx[0];
    }
    const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
    std::printf("[fixture] dummy_v2lite_3layers lm_head_argmax graphs=%d: rows=%lld min_cos=%.9f max_rel_l2=%.3e "
                "identical_rows=%lld nonfinite=%lld greedy_steps=%lld id_mismatch=%lld lm_head_argmax=%lld (off %lld)\n",
                graphs ? 1 : 0, (long long)d.rows, d.min_cos, d.max_rel, (long long)d.identical_rows,
                (long long)d.nonfinite, (long long)steps, (long long)id_mismatch, (long long)g1.lm_head_argmax,
                (long long)g0.lm_head_argmax);
    EXPECT_EQ(d.nonfinite, 0);
    EXPECT_LE(d.max_rel, 1e-4);
    EXPECT_EQ(id_mismatch, 0);
    EXPECT_EQ(g0.lm_head_argmax, 0);
    EXPECT_GT(g1.lm_head_argmax, 0) << "the fused LM head never ran";
    if (graphs) {  // graph replays, and greedy steps whose ids came from the graph (the fused kernel's)
      EXPECT_GT(g1.replayed, 0);
      EXPECT_GT(g1.graph_argmax, 0);
    }
    EXPECT_LT(d.identical_rows, d.rows) << "no row changed: the fused LM head's logits were not compared";
  }
}

}  // namespace
}  // namespace ds::cuda::test
