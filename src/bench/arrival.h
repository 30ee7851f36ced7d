// Request arrival schedules for the serving benchmark.
#pragma once

#include <cstdint>
#include <vector>

namespace ds::bench {

// Arrival times (seconds from the start, non-decreasing, the first at 0) of `n`
// requests at mean rate `rate` req/s. Inter-arrival gaps are Gamma(shape = burstiness,
// scale = 1 / (rate * burstiness)), so the mean gap is 1/rate for any burstiness;
// burstiness 1 is a Poisson process (exponential gaps), < 1 burstier, > 1 more regular
// (vLLM's --burstiness). rate = +inf (or <= 0) -> all zeros (everything sent at once).
// Deterministic for a given seed (std::mt19937_64; the distributions are implemented here,
// not by the standard library, so the sequence is the same on every platform).
std::vector<double> GammaArrivals(int n, double rate, double burstiness, uint64_t seed);
inline std::vector<double> PoissonArrivals(int n, double rate, uint64_t seed) {
  return GammaArrivals(n, rate, 1.0, seed);
}

}  // namespace ds::bench
