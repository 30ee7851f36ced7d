#include <gtest/gtest.h>

#include <numeric>

#include "kv_cache/block_manager.h"

namespace ds {
namespace {

std::vector<int32_t> Seq(int n, int base) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), base);
  return v;
}

TEST(BlockManager, GrowAllOrNothingAndFree) {
  BlockManager bm(4, false);
  SeqBlocks a, b;
  EXPECT_TRUE(bm.Grow(&a, 65));  // 2 blocks
  EXPECT_EQ(a.ids.size(), 2u);
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_FALSE(bm.Grow(&b, 3 * 64));  // needs 3, only 2 free: nothing allocated
  EXPECT_TRUE(b.ids.empty());
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_TRUE(bm.Grow(&a, 128));  // still 2 blocks
  EXPECT_EQ(a.ids.size(), 2u);
  bm.Free(&a);
  EXPECT_EQ(bm.num_free_blocks(), 4);
  bm.CheckInvariants();
}

TEST(BlockManager, PrefixReuseAcrossSequences) {
  BlockManager bm(8, true);
  auto toks = Seq(200, 1000);  // 3 full blocks + 8
  SeqBlocks a;
  ASSERT_TRUE(bm.Grow(&a, 200));
  bm.CommitFullBlocks(&a, toks, 200);
  EXPECT_EQ(bm.num_cached_blocks(), 3);
  // Same prefix, different tail.
  auto toks2 = toks;
  toks2.resize(150);
  toks2.push_back(7);
  PrefixMatch m = bm.Match(toks2, static_cast<int>(toks2.size()) - 1);
  EXPECT_EQ(m.num_tokens(), 128);  // 2 full blocks of the 150 shared tokens
  EXPECT_EQ(m.num_free, 0);        // still held by a
  SeqBlocks b;
  bm.TakePrefix(&b, m, 150);
  EXPECT_EQ(b.ids[0], a.ids[0]);
  EXPECT_EQ(b.ids[1], a.ids[1]);
  ASSERT_TRUE(bm.Grow(&b, 151));
  EXPECT_EQ(b.ids.size(), 3u);
  EXPECT_NE(b.ids[2], a.ids[2]);
  EXPECT_EQ(bm.prefix_hit_tokens(), 128);
  EXPECT_EQ(bm.prefix_query_tokens(), 150);
  bm.Free(&a);
  bm.CheckInvariants();
  // a's first two blocks are still held by b; a's third (cached) block is evictable.
  EXPECT_EQ(bm.num_used_blocks(), 3);
  bm.Free(&b);
  EXPECT_EQ(bm.num_used_blocks(), 0);
  // After freeing, the cached prefix is still matchable (free cached blocks).
  PrefixMatch m2 = bm.Match(toks, 199);
  EXPECT_EQ(m2.num_tokens(), 192);
  EXPECT_EQ(m2.num_free, 3);
  bm.CheckInvariants();
}

TEST(BlockManager, DifferentParentDoesNotMatch) {
  BlockManager bm(8, true);
  auto t1 = Seq(128, 0);
  SeqBlocks a;
  ASSERT_TRUE(bm.Grow(&a, 128));
  bm.CommitFullBlocks(&a, t1, 128);
  // Second block identical, first block different: no match at all.
  auto t2 = t1;
  t2[0] = 99999;
  EXPECT_EQ(bm.Match(t2, 128).num_tokens(), 0);
  bm.Free(&a);
}

TEST(BlockManager, LruEvictionPrefersPlainThenOldestAndTails) {
  BlockManager bm(4, true);
  auto t1 = Seq(128, 0), t2 = Seq(128, 5000);
  SeqBlocks a, b;
  ASSERT_TRUE(bm.Grow(&a, 128));
  bm.CommitFullBlocks(&a, t1, 128);
  bm.Free(&a);  // t1's 2 blocks cached, evictable (older)
  ASSERT_TRUE(bm.Grow(&b, 128));  // takes the 2 plain free blocks first
  EXPECT_EQ(bm.num_evictions(), 0);
  bm.CommitFullBlocks(&b, t2, 128);
  bm.Free(&b);  // t2 cached too (newer)
  EXPECT_EQ(bm.num_cached_blocks(), 4);
  SeqBlocks c;
  ASSERT_TRUE(bm.Grow(&c, 64));  // must evict one: t1's *tail* block (oldest, tail first)
  EXPECT_EQ(bm.num_evictions(), 1);
  EXPECT_EQ(bm.Match(t1, 128).num_tokens(), 64);   // t1's first block survives
  EXPECT_EQ(bm.Match(t2, 128).num_tokens(), 128);  // t2 untouched
  bm.Free(&c);
  bm.CheckInvariants();
}

TEST(BlockManager, DuplicateBlocksStayPrivate) {
  BlockManager bm(8, true);
  auto t = Seq(64, 3);
  SeqBlocks a, b;
  ASSERT_TRUE(bm.Grow(&a, 64));
  ASSERT_TRUE(bm.Grow(&b, 64));  // computed concurrently, no sharing
  bm.CommitFullBlocks(&a, t, 64);
  bm.CommitFullBlocks(&b, t, 64);
  EXPECT_EQ(bm.num_cached_blocks(), 1);
  bm.Free(&a);
  bm.Free(&b);
  EXPECT_EQ(bm.num_free_blocks(), 8);
  bm.CheckInvariants();
}

TEST(BlockManager, PrefixCachingOff) {
  BlockManager bm(4, false);
  auto t = Seq(128, 0);
  SeqBlocks a;
  ASSERT_TRUE(bm.Grow(&a, 128));
  bm.CommitFullBlocks(&a, t, 128);
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  EXPECT_EQ(bm.Match(t, 127).num_tokens(), 0);
  bm.Free(&a);
}

}  // namespace
}  // namespace ds
