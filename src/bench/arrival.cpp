#include "bench/arrival.h"

#include <cmath>
#include <random>

namespace ds::bench {
namespace {
// Uniform in (0, 1) from 53 random bits (never 0, so log() is finite).
double Uniform01(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
}
double StdNormal(std::mt19937_64& rng) {  // Box-Muller
  double u1 = Uniform01(rng), u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}
// Gamma(shape k, scale 1): Marsaglia & Tsang (2000), with the k < 1 boost
// Gamma(k) = Gamma(k + 1) * U^(1/k).
double StdGamma(double k, std::mt19937_64& rng) {
  if (k == 1.0) return -std::log(Uniform01(rng));  // exponential
  if (k < 1.0) return StdGamma(k + 1.0, rng) * std::pow(Uniform01(rng), 1.0 / k);
  double d = k - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = StdNormal(rng), v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = Uniform01(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}
}  // namespace

std::vector<double> GammaArrivals(int n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(n > 0 ? n : 0, 0.0);
  if (n <= 0 || !(rate > 0) || std::isinf(rate)) return t;
  if (!(burstiness > 0)) burstiness = 1.0;
  std::mt19937_64 rng(seed);
  double scale = 1.0 / (rate * burstiness), now = 0;
  for (int i = 1; i < n; ++i) {  // the first request goes at 0, like vLLM's generator
    now += StdGamma(burstiness, rng) * scale;
    t[i] = now;
  }
  return t;
}

}  // namespace ds::bench
