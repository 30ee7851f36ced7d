// The CUDA backend's host-only planning rules (src/backend/cuda/host_plans.h), checked in the
// CPU build: decode-graph buckets and block-table widths, the skinny GEMM's FP8 dense dispatch
// and split-K rule (a decode batch and its padded graph bucket must get the same plan, so the
// graph and the eager pass sum in the same order), and the sm_90a MLA decode split plan (its
// splits must fit the workspace the runner reserves, MlaDecodeWorkspaceFloats: one partial per
// ceil(max_context / kv_chunk) splits).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/host_plans.h"

namespace ds::cuda {
namespace {

TEST(CudaHostPlans, GraphBucketIsTheSmallestHoldingBucket) {
  for (int s = 1; s <= kMaxGraphBucket; ++s) {
    const int b = GraphBucket(s);
    ASSERT_GE(b, s);
    bool listed = false;
    for (int c : kGraphBuckets) {
      listed = listed || c == b;
      if (c < b) {
        EXPECT_LT(c, s) << "bucket " << c << " holds " << s << " sequences but " << b << " was picked";
      }
    }
    EXPECT_TRUE(listed) << b;
  }
  EXPECT_EQ(GraphBucket(kMaxGraphBucket + 1), 0);
}

TEST(CudaHostPlans, GraphCapBlocksIsTheSmallestPowerOfTwoWidth) {
  for (int need = 1; need <= 5000; ++need) {
    const int cap = GraphCapBlocks(need);
    ASSERT_GE(cap, need);
    ASSERT_GE(cap, kMinGraphBlocks);
    EXPECT_EQ(cap % kMinGraphBlocks, 0);
    const int m = cap / kMinGraphBlocks;
    EXPECT_EQ(m & (m - 1), 0) << cap << " is not a power-of-two multiple of " << kMinGraphBlocks;
    if (cap > kMinGraphBlocks) {
      EXPECT_LT(cap / 2, need) << "width " << cap / 2 << " already holds " << need;
    }
  }
}

struct Proj {
  const char* name;
  int64_t N, K;
};
// DeepSeek-V3's FP8 dense projections (one GPU) and V2-Lite's shapes.
const std::vector<Proj> kProjs = {
    {"v3_q_a", 1536, 7168},         {"v3_q_b", 24576, 1536},       {"v3_kv_a", 576, 7168},
    {"v3_kv_b", 32768, 512},        {"v3_o_proj", 7168, 16384},    {"v3_dense_gate_up", 36864, 7168},
    {"v3_dense_down", 7168, 18432}, {"v3_shared_gate_up", 4096, 7168}, {"v3_shared_down", 7168, 2048},
    {"v2lite_q", 3072, 2048},       {"v2lite_kv_a", 576, 2048},    {"v2lite_o_proj", 2048, 2048},
};

// Graph replay and eager pass of the same decode batch: S rows eagerly, GraphBucket(S) rows in
// the graph. The dense dispatch and the split decision must not tell them apart.
TEST(CudaHostPlans, SkinnyDispatchSameForBatchAndItsGraphBucket) {
  for (const Proj& pr : kProjs)
    for (int64_t sms : {78, 132})
      for (int s = 1; s <= kMaxGraphBucket; ++s) {
        const int b = GraphBucket(s);
        EXPECT_EQ(SkinnyDenseFp8(s, pr.N), SkinnyDenseFp8(b, pr.N)) << pr.name << " rows " << s << " vs " << b;
        const int64_t tiles32 = (pr.N + 31) / 32;
        EXPECT_EQ(SkinnySplitKWins(true, true, pr.N, pr.K, s, tiles32, sms),
                  SkinnySplitKWins(true, true, pr.N, pr.K, b, tiles32, sms))
            << pr.name << " rows " << s << " vs " << b << ", " << sms << " SMs";
      }
}

TEST(CudaHostPlans, SkinnySplitKRule) {
  const int64_t sms = 132;
  // Narrow FP8 dense weights at decode sizes split (q_a: 48 32-row tiles, K 7168).
  EXPECT_TRUE(SkinnySplitKWins(true, true, 1536, 7168, 1, 48, sms));
  EXPECT_TRUE(SkinnySplitKWins(true, true, 1536, 7168, 16, 48, sms));   // N <= 2048 at <= 16 rows
  EXPECT_FALSE(SkinnySplitKWins(true, true, 1536, 7168, 17, 48, sms));  // class 32
  EXPECT_TRUE(SkinnySplitKWins(true, true, 576, 7168, 64, 18, sms));    // kv_a: N <= 1024 at <= 64
  EXPECT_TRUE(SkinnySplitKWins(true, true, 7168, 16384, 128, 224, sms));  // o_proj: K >= 16384 at <= 128
  EXPECT_FALSE(SkinnySplitKWins(true, true, 7168, 16384, 129, 224, sms));
  // Never: K < 4096 (shared down), bf16, MoE / batched groups, or >= 4 tiles per SM.
  EXPECT_FALSE(SkinnySplitKWins(true, true, 7168, 2048, 1, 224, sms));
  EXPECT_FALSE(SkinnySplitKWins(false, true, 1536, 7168, 1, 48, sms));
  EXPECT_FALSE(SkinnySplitKWins(true, false, 1536, 7168, 1, 48, sms));
  EXPECT_FALSE(SkinnySplitKWins(true, true, 24576, 7168, 1, 4 * sms, sms));
}

// Fp8SkinnyAutoKsplit: the V3 projections' measured-best K splits (session 15 runs 4 and 7).
TEST(CudaHostPlans, Fp8SkinnyAutoKsplitV3Projections) {
  for (int64_t M : {1, 8, 16, 32, 64}) {
    EXPECT_EQ(Fp8SkinnyAutoKsplit(M, 576, 7168), 8) << M;    // kv_a: 9 tiles
    EXPECT_EQ(Fp8SkinnyAutoKsplit(M, 1536, 7168), 4) << M;   // q_a: 24 tiles
    EXPECT_EQ(Fp8SkinnyAutoKsplit(M, 24576, 1536), 1) << M;  // q_b
    EXPECT_EQ(Fp8SkinnyAutoKsplit(M, 32768, 512), 1) << M;   // kv_b
    EXPECT_EQ(Fp8SkinnyAutoKsplit(M, 7168, 16384), 1) << M;  // o_proj: 112 tiles
    EXPECT_EQ(Fp8SkinnyAutoKsplit(M, 7168, 2048), 1) << M;   // shared down: K < 4096
  }
  EXPECT_EQ(Fp8SkinnyAutoKsplit(16, 4096, 7168), 1);  // shared gate_up, 64 tiles, <= 32 rows
  EXPECT_EQ(Fp8SkinnyAutoKsplit(64, 4096, 7168), 2);  // ... more than 32 rows
  // A split must divide K's 128-wide blocks: 40 blocks keep 8, 36 take 4, 35 none.
  EXPECT_EQ(Fp8SkinnyAutoKsplit(1, 576, 128 * 40), 8);
  EXPECT_EQ(Fp8SkinnyAutoKsplit(1, 576, 128 * 36), 4);
  EXPECT_EQ(Fp8SkinnyAutoKsplit(1, 576, 128 * 35), 1);
}

TEST(CudaHostPlans, SkinnyDenseFp8Thresholds) {
  EXPECT_TRUE(SkinnyDenseFp8(32, 36864));
  EXPECT_FALSE(SkinnyDenseFp8(33, 36864));
  EXPECT_TRUE(SkinnyDenseFp8(64, 8192));
  EXPECT_FALSE(SkinnyDenseFp8(64, 8193));
  EXPECT_TRUE(SkinnyDenseFp8(128, 4096));
  EXPECT_FALSE(SkinnyDenseFp8(128, 4097));
  EXPECT_FALSE(SkinnyDenseFp8(129, 576));
}

// Every plan: chunks of whole 64-key tiles, at least kv_chunk keys, covering the longest
// sequence, and no more splits than the workspace holds.
TEST(CudaHostPlans, MlaDecodeSm90PlanFitsTheWorkspace) {
  int checked = 0;
  for (int64_t seqs : {1, 2, 3, 8, 64, 256})
    for (int64_t max_ctx : {1, 63, 64, 65, 1000, 4096, 32768, 131072})
      for (int64_t heads : {16, 128})
        for (int64_t kv_chunk : {64, 256})
          for (int64_t sms : {1, 78, 132})
            for (int mode = 0; mode < 3; ++mode) {
              // 0: total <= 0, S x max (a graph bucket's hints); 1: a ragged batch; 2: the
              // bucket's hints as a graph's capacity (capacity_hints).
              const bool uniform = mode != 1, capacity = mode == 2;
              const int64_t total = uniform ? 0 : (seqs - 1) * ((max_ctx + 1) / 2) + max_ctx;
              const MlaDecodeSm90Plan pl = PlanMlaDecodeSm90(1, heads, seqs, max_ctx, total, kv_chunk, sms, capacity);
              const std::string at = "seqs " + std::to_string(seqs) + " ctx " + std::to_string(max_ctx) + " heads " +
                                     std::to_string(heads) + " kv_chunk " + std::to_string(kv_chunk) + " sms " +
                                     std::to_string(sms) + (capacity ? " capacity" : uniform ? " uniform" : " ragged");
              ASSERT_EQ(pl.chunk % kMlaDecodeSm90KeysPerTile, 0) << at;
              ASSERT_GE(pl.chunk, kv_chunk) << at;
              ASSERT_GE(pl.max_splits * pl.chunk, max_ctx) << at;
              ASSERT_LT((pl.max_splits - 1) * pl.chunk, std::max<int64_t>(1, max_ctx)) << at;
              const int64_t ws_splits = std::max<int64_t>(1, (max_ctx + kv_chunk - 1) / kv_chunk);
              ASSERT_LE(pl.max_splits, ws_splits) << at;
              ASSERT_EQ(pl.nrb, (heads + kMlaDecodeSm90RowsPerCta - 1) / kMlaDecodeSm90RowsPerCta) << at;
              ++checked;
            }
  EXPECT_EQ(checked, 6 * 8 * 2 * 2 * 3 * 3);
  // MTP: 2 query rows per sequence x 128 heads = 4 row blocks.
  EXPECT_EQ(PlanMlaDecodeSm90(2, 128, 4, 4096, 0, 256, 132).nrb, 4);
}

// capacity_hints: 64 sequences of 16 heads whose graph capacity is 8K keys (real contexts 4K-8K).
// The plan for exactly 8K takes 4K-key chunks, which at a real 4.1K leaves half the CTAs with
// 64 keys (session 7 run 6); over the range it must take about 2K (1.4K-2.1K keys: within a few
// percent of the best chunk at 4.1K, 6K and 8K). Batch 1 stays at the smallest chunk (one wave).
TEST(CudaHostPlans, MlaDecodeSm90CapacityPlanCoversTheRange) {
  EXPECT_EQ(PlanMlaDecodeSm90(1, 16, 64, 8192, 0, 256, 132, false).chunk, 4096);
  const int64_t c = PlanMlaDecodeSm90(1, 16, 64, 8192, 0, 256, 132, true).chunk;
  EXPECT_GE(c, 1408);
  EXPECT_LE(c, 2112);
  for (int64_t ctx : {4160, 6144, 8192}) {
    double best = 1e300;
    for (int64_t cc = 256; cc <= 8192; cc += 64) best = std::min(best, MlaDecodeSm90RangeTime(cc, ctx, 64, 132));
    EXPECT_LE(MlaDecodeSm90RangeTime(c, ctx, 64, 132), 1.05 * best) << "ctx " << ctx;
  }
  EXPECT_EQ(PlanMlaDecodeSm90(1, 128, 1, 2048, 0, 128, 132, true).chunk, 128);
  EXPECT_EQ(PlanMlaDecodeSm90(1, 128, 1, 2048, 0, 128, 132, false).chunk, 128);
}

// The balanced work list (session 36): every sequence's keys [0, ctx) covered exactly once by
// 64-aligned splits numbered 0..n-1, the split counts and stride consistent, the list longest
// first, and on half 32K + half 512 (the mixed anchors) a simulated makespan below the uniform
// chunk plan's (the same cost model: keys + kMlaDecodeSm90CtaOverhead a CTA, + kMlaDecodeSm90SplitCost
// for a split of a sequence cut in several, first free SM); a uniform batch whose one split a
// sequence fills one wave keeps one split.
TEST(CudaHostPlans, MlaDecodeSm90WorkListCoversEveryKeyOnce) {
  const std::vector<std::vector<int32_t>> batches = {
      {32768}, {1, 63, 64, 65}, {0, 100}, std::vector<int32_t>(128, 4096), {4097, 1, 65536, 200, 3000}};
  for (const auto& ctx : batches)
    for (int64_t nrb : {1, 2})
      for (int64_t sms : {1, 132, 528}) {
        const MlaDecodeSm90WorkList wl = PlanMlaDecodeSm90WorkList(ctx, nrb, sms);
        ASSERT_EQ(wl.splits.size(), ctx.size());
        std::vector<std::vector<std::pair<int32_t, int32_t>>> per(ctx.size());
        int64_t max_n = 1;
        for (size_t i = 0; i < wl.items.size(); ++i) {
          const auto& it = wl.items[i];
          ASSERT_GE(it.s, 0);
          ASSERT_LT(static_cast<size_t>(it.s), ctx.size());
          EXPECT_EQ(it.kbeg % 64, 0);
          EXPECT_LE(it.kbeg, it.kend);
          EXPECT_LE(it.kend, std::max<int32_t>(ctx[it.s], 0)) << "a split past its context";
          EXPECT_LT(it.split, wl.splits[it.s]);
          if (i > 0) {
            EXPECT_GE(wl.items[i - 1].kend - wl.items[i - 1].kbeg, it.kend - it.kbeg) << "not longest first";
          }
          per[it.s].push_back({it.split, it.kbeg});
        }
        for (size_t s = 0; s < ctx.size(); ++s) {
          ASSERT_GE(wl.splits[s], 1) << "sequence " << s;
          ASSERT_EQ(static_cast<int32_t>(per[s].size()), wl.splits[s]) << "sequence " << s;
          max_n = std::max<int64_t>(max_n, wl.splits[s]);
          std::sort(per[s].begin(), per[s].end());
          int32_t next = 0;
          for (size_t k = 0; k < per[s].size(); ++k) {
            EXPECT_EQ(per[s][k].first, static_cast<int32_t>(k));
            EXPECT_EQ(per[s][k].second, std::min(next, ctx[s]));
            // this split's end
            for (const auto& it : wl.items)
              if (it.s == static_cast<int32_t>(s) && it.split == static_cast<int32_t>(k)) next = it.kend;
          }
          EXPECT_EQ(next, std::max(ctx[s], 0)) << "sequence " << s << " not covered to its end";
        }
        EXPECT_EQ(wl.max_splits, max_n);
      }
  // Mixed lengths: below the uniform plan's makespan under the same model.
  std::vector<int32_t> mixed(64);
  for (int i = 0; i < 64; ++i) mixed[i] = i % 2 ? 512 : 32768;
  for (int64_t nrb : {1, 2}) {
    const MlaDecodeSm90Plan up = PlanMlaDecodeSm90(1, nrb * 64, 64, 32768, 32 * (32768 + 512), 256, 132, false);
    std::vector<double> costs;
    for (int32_t c : mixed) {
      const bool several = c > up.chunk;  // its splits write partials for the combine
      for (int64_t sp = 0; sp < up.max_splits; ++sp) {
        const int64_t k = std::max<int64_t>(0, std::min<int64_t>(c, (sp + 1) * up.chunk) - sp * up.chunk);
        const double cost = double(k + kMlaDecodeSm90CtaOverhead + (several ? kMlaDecodeSm90SplitCost : 0));
        for (int64_t r = 0; r < nrb; ++r) costs.push_back(k > 0 ? cost : 64.0);
      }
    }
    const double uniform = MlaDecodeSm90Makespan(costs, 132);
    const MlaDecodeSm90WorkList wl = PlanMlaDecodeSm90WorkList(mixed, nrb, 132);
    EXPECT_LT(wl.est_time * 1.1, uniform) << "nrb " << nrb << ": " << wl.est_time << " vs uniform " << uniform;
  }
  EXPECT_EQ(PlanMlaDecodeSm90WorkList(std::vector<int32_t>(128, 8192), 1, 132).max_splits, 1);  // 16 heads x 128 x 8K
  // The workspace cap: 16 heads x 1 x 8K would take 64-key splits (128 of them); with a workspace
  // for kv_chunk 256 (32 splits) the plan stays within it, and a cap of 1 leaves one split.
  EXPECT_GT(PlanMlaDecodeSm90WorkList({8192}, 1, 132).max_splits, 32);
  EXPECT_LE(PlanMlaDecodeSm90WorkList({8192}, 1, 132, 32).max_splits, 32);
  EXPECT_EQ(PlanMlaDecodeSm90WorkList(mixed, 2, 132, 1).max_splits, 1);
  EXPECT_EQ(PlanMlaDecodeSm90WorkList(std::vector<int32_t>(64, 4096), 2, 132).max_splits, 1);   // 128 heads x 64 x 4K
  // Session 41: the 128-head mixed anchor takes 2 splits of 16K a long sequence (the longest context / 2):
  // 128 long CTAs, one an SM, the 64 short ones on the other 4 SMs, makespan 16,384 + 192 + 1,024 = 17,600
  // key-equivalents, where the waves' targets gave 8 splits of 4K (four CTAs an SM, 4 x 5,312 = 21,248).
  const MlaDecodeSm90WorkList m2 = PlanMlaDecodeSm90WorkList(mixed, 2, 132);
  EXPECT_EQ(m2.max_splits, 2);
  EXPECT_DOUBLE_EQ(m2.est_time, 16384.0 + kMlaDecodeSm90CtaOverhead + kMlaDecodeSm90SplitCost);
}

}  // namespace
}  // namespace ds::cuda
