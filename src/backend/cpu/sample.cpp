// cpu::Sample (ops.h). Temperature 0: argmax (lowest index on ties). Else softmax(logits/T),
// top-k, top-p (smallest sorted prefix with mass >= top_p), renormalise, draw u in [0,1)
// from a counter-based RNG (splitmix64 of seed and step).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/ops.h"

namespace ds::cpu {

namespace {
uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

int32_t Sample(const SampleParams& p) {
  const int64_t V = p.vocab;
  if (p.temperature <= 0.0f || p.top_k == 1) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (p.logits[i] > p.logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  int64_t k = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
  auto cmp = [&](int32_t a, int32_t b) {
    return p.logits[a] > p.logits[b] || (p.logits[a] == p.logits[b] && a < b);
  };
  if (k < V) {
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), cmp);
    idx.resize(k);
  } else {
    std::sort(idx.begin(), idx.end(), cmp);
  }
  const float inv_t = 1.0f / p.temperature;
  const float mx = p.logits[idx[0]];
  std::vector<double> prob(idx.size());
  double sum = 0.0;
  for (size_t i = 0; i < idx.size(); ++i) {
    prob[i] = std::exp(static_cast<double>((p.logits[idx[i]] - mx) * inv_t));
    sum += prob[i];
  }
  size_t keep = idx.size();
  if (p.top_p < 1.0f) {
    double acc = 0.0;
    for (size_t i = 0; i < idx.size(); ++i) {
      acc += prob[i] / sum;
      if (acc >= p.top_p) { keep = i + 1; break; }
    }
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += prob[i];
  const uint64_t r = SplitMix(SplitMix(p.seed) ^ (p.step * 0xD1B54A32D192ED03ull));
  const double u = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0) * kept;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace ds::cpu
