// Token sampling: greedy at temperature 0, else temperature / top-k / top-p with a
// counter-based RNG. RNG (every backend must use the same): u = (SplitMix64(seed ^
// SplitMix64(step)) >> 11) * 2^-53, a uniform double in [0, 1).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/ops.h"
#include "common/check.h"
#include "common/rng.h"

namespace ds::cpu {
int32_t GreedyArgmax(const float* logits, int64_t vocab) {
  // NaN never wins (before, a NaN at id 0 pinned the result to 0, unlike the CUDA argmax).
  int64_t best = -1;
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

int32_t Sample(const SampleParams& p) {
  DS_CHECK(p.vocab > 0) << "empty vocabulary";
  if (p.temperature <= 0.0f) return GreedyArgmax(p.logits, p.vocab);
  // softmax(logits / T) in double.
  std::vector<double> prob(p.vocab);
  double mx = -INFINITY;
  for (int64_t i = 0; i < p.vocab; ++i) mx = std::max(mx, static_cast<double>(p.logits[i]) / p.temperature);
  double sum = 0.0;
  for (int64_t i = 0; i < p.vocab; ++i) {
    prob[i] = std::exp(static_cast<double>(p.logits[i]) / p.temperature - mx);
    sum += prob[i];
  }
  for (auto& v : prob) v /= sum;
  std::vector<int32_t> order(p.vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return prob[a] > prob[b]; });
  int64_t keep = p.vocab;
  if (p.top_k > 0) keep = std::min<int64_t>(keep, p.top_k);
  double kept_mass = 0.0;
  for (int64_t i = 0; i < keep; ++i) kept_mass += prob[order[i]];
  if (p.top_p > 0.0f && p.top_p < 1.0f) {
    // Smallest prefix whose (renormalised) mass reaches top_p.
    double cum = 0.0;
    int64_t k = 0;
    while (k < keep) {
      cum += prob[order[k]];
      ++k;
      if (cum >= p.top_p * kept_mass) break;
    }
    keep = k;
    kept_mass = cum;
  }
  const double u = SampleUniform(p.seed, p.step);
  const double target = u * kept_mass;
  double cum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += prob[order[i]];
    if (target < cum) return order[i];
  }
  return order[keep - 1];
}

}  // namespace ds::cpu
