// DP placement policies (scheduler/dp_policy.h): pure functions of the ranks' loads.
#include <gtest/gtest.h>

#include <vector>

#include "scheduler/dp_policy.h"

namespace ds {
namespace {

std::unique_ptr<DpPolicy> Make(const std::string& m) {
  auto p = MakeDpPolicy(m);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

TEST(DpPolicy, MinimumTokensPicksTheLeastAttentionCost) {
  auto p = Make("minimum_tokens");
  // Rank 1 has more requests but fewer context tokens: attention cost, not request count.
  std::vector<DpRankLoad> loads = {{2, 9000, true}, {5, 3000, true}, {1, 8000, true}};
  EXPECT_EQ(p->Choose(loads, {100, 16}), 1);
  // Ties on tokens: fewer requests, then the lower rank.
  loads = {{3, 1000, true}, {2, 1000, true}, {2, 1000, true}};
  EXPECT_EQ(p->Choose(loads, {100, 16}), 1);
  // Ranks that stopped admission are skipped; none accepting -> -1.
  loads = {{0, 0, false}, {9, 50000, true}};
  EXPECT_EQ(p->Choose(loads, {100, 16}), 1);
  loads = {{0, 0, false}, {0, 0, false}};
  EXPECT_EQ(p->Choose(loads, {100, 16}), -1);
}

TEST(DpPolicy, ShortestQueueAndRoundRobin) {
  auto sq = Make("shortest_queue");
  std::vector<DpRankLoad> loads = {{4, 10, true}, {2, 90000, true}, {3, 5, true}};
  EXPECT_EQ(sq->Choose(loads, {1, 1}), 1);
  auto rr = Make("round_robin");
  std::vector<DpRankLoad> three(3);
  std::vector<int> got;
  for (int i = 0; i < 6; ++i) got.push_back(rr->Choose(three, {1, 1}));
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  three[1].accepting = false;
  for (int i = 0; i < 4; ++i) EXPECT_NE(rr->Choose(three, {1, 1}), 1);
}

TEST(DpPolicy, UnknownMethodIsAClearError) {
  auto p = MakeDpPolicy("least_loaded");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("round_robin | shortest_queue | minimum_tokens"), std::string::npos);
}

}  // namespace
}  // namespace ds
