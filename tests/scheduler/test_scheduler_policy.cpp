#include <gtest/gtest.h>

#include <map>

#include "scheduler/scheduler_policy.h"

namespace ds {
namespace {

class FakeCache : public CacheView {
 public:
  int free = 0;
  std::map<int64_t, PrefixHit> hits;
  int block_size() const override { return 64; }
  int num_free_blocks() const override { return free; }
  PrefixHit LookupPrefix(int64_t id) const override {
    auto it = hits.find(id);
    return it == hits.end() ? PrefixHit{} : it->second;
  }
};

TEST(FcfsPolicy, ChunkedPrefillUnderBudgetMixedWithDecode) {
  FcfsPolicy p({/*budget=*/100, /*max_running=*/8});
  FakeCache c;
  c.free = 100;
  // Two decoding sequences (1 token each) and one long waiting prompt.
  std::vector<SchedSeq> running = {{1, 65, 64, 1}, {2, 10, 9, 1}};
  std::vector<SchedSeq> waiting = {{3, 500, 0, 0}};
  auto d = p.Schedule(running, waiting, c);
  ASSERT_EQ(d.scheduled.size(), 3u);
  EXPECT_EQ(d.scheduled[0].num_new_tokens, 1);
  EXPECT_EQ(d.scheduled[1].num_new_tokens, 1);
  EXPECT_EQ(d.scheduled[2].id, 3);
  EXPECT_EQ(d.scheduled[2].num_new_tokens, 98);  // the rest of the budget: a prefill chunk
  EXPECT_TRUE(d.scheduled[2].from_waiting);
  EXPECT_EQ(d.num_batched_tokens, 100);
  EXPECT_TRUE(d.preempted.empty());
}

TEST(FcfsPolicy, MaxRunningLimitsAdmission) {
  FcfsPolicy p({1000, 2});
  FakeCache c;
  c.free = 100;
  std::vector<SchedSeq> running = {{1, 5, 4, 1}};
  std::vector<SchedSeq> waiting = {{2, 10, 0, 0}, {3, 10, 0, 0}};
  auto d = p.Schedule(running, waiting, c);
  ASSERT_EQ(d.scheduled.size(), 2u);
  EXPECT_EQ(d.scheduled[1].id, 2);
}

TEST(FcfsPolicy, PreemptsLowestPriorityWhenBlocksRunOut) {
  FcfsPolicy p({1000, 8});
  FakeCache c;
  c.free = 0;
  // Seq 1 needs a new block (64 computed, 65 tokens); seq 2 holds 3 blocks.
  std::vector<SchedSeq> running = {{1, 65, 64, 1}, {2, 130, 129, 3}};
  auto d = p.Schedule(running, {{9, 10, 0, 0}}, c);
  ASSERT_EQ(d.preempted.size(), 1u);
  EXPECT_EQ(d.preempted[0], 2);
  ASSERT_EQ(d.scheduled.size(), 1u);
  EXPECT_EQ(d.scheduled[0].id, 1);
  // No admission in a step that preempted.
}

TEST(FcfsPolicy, SelfPreemptionWhenAlone) {
  FcfsPolicy p({1000, 8});
  FakeCache c;
  c.free = 0;
  auto d = p.Schedule({{1, 65, 64, 1}}, {}, c);
  ASSERT_EQ(d.preempted.size(), 1u);
  EXPECT_TRUE(d.scheduled.empty());
}

TEST(FcfsPolicy, PrefixHitReducesWorkAndCountsRevivedBlocks) {
  FcfsPolicy p({1000, 8});
  FakeCache c;
  c.free = 3;
  c.hits[5] = {128, 2, 2};  // 2 cached blocks, both currently free
  auto d = p.Schedule({}, {{5, 200, 0, 0}}, c);
  // 200 tokens need 4 blocks: 2 cached + 2 new, but reviving 2 free cached blocks also
  // consumes free blocks: 2 + 2 = 4 > 3 -> does not fit.
  EXPECT_TRUE(d.scheduled.empty());
  c.free = 4;
  d = p.Schedule({}, {{5, 200, 0, 0}}, c);
  ASSERT_EQ(d.scheduled.size(), 1u);
  EXPECT_EQ(d.scheduled[0].num_cached_tokens, 128);
  EXPECT_EQ(d.scheduled[0].num_new_tokens, 72);
}

TEST(FcfsPolicy, HeadOfLineBlocksLaterWaiting) {
  FcfsPolicy p({1000, 8});
  FakeCache c;
  c.free = 2;
  auto d = p.Schedule({}, {{1, 1000, 0, 0}, {2, 10, 0, 0}}, c);
  EXPECT_TRUE(d.scheduled.empty());  // 1 does not fit; 2 must not overtake it
}

// decode_reserve_ratio (--schedule-conservativeness): admission needs the whole prompt plus the
// reserved share of the output, after the running set's own reserve; 0 keeps vLLM v1's chunk-only
// admission.
TEST(FcfsPolicy, ReserveAdmitsWholePromptsOnly) {
  FakeCache c;
  c.free = 10;
  // A 1,000-token prompt (16 blocks) with 100 output tokens; budget 256: a 4-block chunk.
  const std::vector<SchedSeq> waiting = {{1, 1000, 0, 0, 100}};
  auto d = FcfsPolicy({256, 8, 0.0}).Schedule({}, waiting, c);
  ASSERT_EQ(d.scheduled.size(), 1u);  // vLLM v1: the chunk fits
  EXPECT_EQ(d.scheduled[0].num_new_tokens, 256);
  // With a reserve the whole prompt would be needed, but an empty running set still admits by
  // the chunk (nothing running could free blocks later).
  d = FcfsPolicy({256, 8, 0.5}).Schedule({}, waiting, c);
  ASSERT_EQ(d.scheduled.size(), 1u);
  // Behind a running sequence it waits: 1,050 tokens = 17 blocks > 10 free.
  const std::vector<SchedSeq> running = {{7, 11, 10, 1, 5}};
  d = FcfsPolicy({256, 8, 0.5}).Schedule(running, waiting, c);
  ASSERT_EQ(d.scheduled.size(), 1u);
  EXPECT_EQ(d.scheduled[0].id, 7);
  c.free = 17;  // seq 7 reserves nothing more (11 + 3 tokens fit its block): 17 free blocks cover 17
  d = FcfsPolicy({256, 8, 0.5}).Schedule(running, waiting, c);
  ASSERT_EQ(d.scheduled.size(), 2u);
}

TEST(FcfsPolicy, RunningReserveLimitsLaterAdmissions) {
  FakeCache c;
  c.free = 12;
  // Seq 1 decodes (65 tokens, 64 computed, 1 block) and may still write 640 tokens.
  const std::vector<SchedSeq> running = {{1, 65, 64, 1, 640}};
  const std::vector<SchedSeq> waiting = {{2, 64, 0, 0, 0}, {3, 64, 0, 0, 0}};
  // Ratio 0: both one-block prompts are admitted.
  auto d = FcfsPolicy({1000, 8, 0.0}).Schedule(running, waiting, c);
  EXPECT_EQ(d.scheduled.size(), 3u);
  // Ratio 1: seq 1 takes a block now (12 -> 11 free) and reserves ceil(705 / 64) - 2 = 10 more;
  // seq 2's block fits the one left, seq 3's does not.
  d = FcfsPolicy({1000, 8, 1.0}).Schedule(running, waiting, c);
  ASSERT_EQ(d.scheduled.size(), 2u);
  EXPECT_EQ(d.scheduled[1].id, 2);
  EXPECT_TRUE(d.preempted.empty());
}

}  // namespace
}  // namespace ds
