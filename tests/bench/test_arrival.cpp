#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bench/arrival.h"

namespace ds::bench {
namespace {

TEST(BenchArrival, InfiniteRateSendsAllAtOnce) {
  auto t = PoissonArrivals(5, std::numeric_limits<double>::infinity(), 1);
  ASSERT_EQ(t.size(), 5u);
  for (double x : t) EXPECT_EQ(x, 0.0);
  EXPECT_TRUE(PoissonArrivals(0, 3.0, 1).empty());
}

TEST(BenchArrival, SeededAndDeterministic) {
  auto a = PoissonArrivals(100, 4.0, 42);
  auto b = PoissonArrivals(100, 4.0, 42);
  auto c = PoissonArrivals(100, 4.0, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a[0], 0.0);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_GE(a[i], a[i - 1]);
}

// Statistical properties of a Poisson process at rate r: exponential gaps with mean 1/r and
// coefficient of variation 1, counts per unit time with variance = mean.
TEST(BenchArrival, PoissonGapStatistics) {
  const int n = 200000;
  const double rate = 8.0;
  auto t = PoissonArrivals(n, rate, 7);
  double sum = 0, sum2 = 0;
  for (int i = 1; i < n; ++i) {
    double g = t[i] - t[i - 1];
    sum += g;
    sum2 += g * g;
  }
  double mean = sum / (n - 1), var = sum2 / (n - 1) - mean * mean;
  EXPECT_NEAR(mean, 1.0 / rate, 0.01 / rate);           // 1% (std error ~0.22%)
  EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.02);        // CV of an exponential is 1
  // P(gap > 1/rate) = e^-1 for an exponential.
  int longer = 0;
  for (int i = 1; i < n; ++i) longer += (t[i] - t[i - 1]) > 1.0 / rate;
  EXPECT_NEAR(static_cast<double>(longer) / (n - 1), std::exp(-1.0), 0.005);
}

TEST(BenchArrival, GammaBurstinessKeepsMeanChangesSpread) {
  const int n = 100000;
  for (double k : {0.25, 1.0, 4.0}) {
    auto t = GammaArrivals(n, 2.0, k, 3);
    double sum = 0, sum2 = 0;
    for (int i = 1; i < n; ++i) {
      double g = t[i] - t[i - 1];
      sum += g;
      sum2 += g * g;
    }
    double mean = sum / (n - 1), var = sum2 / (n - 1) - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.5 * 0.03) << "k=" << k;
    // Gamma(k) gaps: CV = 1/sqrt(k).
    EXPECT_NEAR(std::sqrt(var) / mean, 1.0 / std::sqrt(k), 0.05 / std::sqrt(k)) << "k=" << k;
  }
}

}  // namespace
}  // namespace ds::bench
