#include "scheduler/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"
#include "common/rng.h"

namespace ds {

void LogSoftmax(const float* logits, int64_t vocab, float* out) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < vocab; ++i) out[i] = logits[i] - lse;
}

// In the order (probability descending, id ascending) over the tokens `idx`, the first token at
// which the running mass satisfies `crossed` (monotone), and that running mass; -1 if none.
// Quickselect on cumulative mass: expected O(n), no full sort.
template <typename Before, typename Pred>
std::pair<int32_t, double> Crossing(std::vector<int32_t> idx, const std::vector<double>& prob,
                                    const Before& before, const Pred& crossed) {
  double offset = 0.0;
  bool must = false;  // the crossing is known to lie inside idx (up to rounding)
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  while (!idx.empty()) {
    if (idx.size() <= 64) {
      std::sort(idx.begin(), idx.end(), before);
      for (int32_t t : idx) {
        offset += prob[t];
        if (crossed(offset)) return {t, offset};
      }
      return must ? std::make_pair(idx.back(), offset) : std::make_pair(int32_t{-1}, offset);
    }
    rng = SplitMix64(rng);
    const int32_t pivot = idx[rng % idx.size()];
    std::vector<int32_t> above, below;
    above.reserve(idx.size() / 2);
    below.reserve(idx.size() / 2);
    double mass_above = 0.0;
    for (int32_t t : idx) {
      if (t == pivot) continue;
      if (before(t, pivot)) {
        above.push_back(t);
        mass_above += prob[t];
      } else {
        below.push_back(t);
      }
    }
    if (!above.empty() && crossed(offset + mass_above)) {
      idx.swap(above);
      must = true;
      continue;
    }
    offset += mass_above;
    offset += prob[pivot];
    if (crossed(offset)) return {pivot, offset};
    idx.swap(below);
  }
  return {-1, offset};
}

int32_t FastSample(const float* logits, int64_t vocab, float temperature, float top_p, int top_k,
                   uint64_t seed, uint64_t step) {
  if (temperature <= 0.0f) return cpu::GreedyArgmax(logits, vocab);
  // prob = softmax(logits / T) in double, exactly as cpu::Sample computes it.
  std::vector<double> prob(vocab);
  double mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]) / temperature);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    prob[i] = std::exp(static_cast<double>(logits[i]) / temperature - mx);
    sum += prob[i];
  }
  for (auto& v : prob) v /= sum;
  auto before = [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); };
  const double u = SampleUniform(seed, step);
  const int64_t K = top_k > 0 ? std::min<int64_t>(top_k, vocab) : vocab;
  std::vector<int32_t> kept(vocab);
  std::iota(kept.begin(), kept.end(), 0);
  if (K < vocab) {
    std::nth_element(kept.begin(), kept.begin() + (K - 1), kept.end(), before);
    kept.resize(K);
  }
  double kept_mass = 1.0;  // all tokens: the normalised mass
  if (K < vocab) {
    kept_mass = 0.0;
    for (int32_t t : kept) kept_mass += prob[t];
  }
  if (top_p > 0.0f && top_p < 1.0f) {
    const double thr = top_p * kept_mass;
    auto [tok, cum] = Crossing(kept, prob, before, [thr](double c) { return c >= thr; });
    if (tok >= 0) {
      // Keep the tokens ranked up to and including `tok`.
      std::vector<int32_t> cut;
      cut.reserve(64);
      for (int32_t t : kept)
        if (t == tok || before(t, tok)) cut.push_back(t);
      kept.swap(cut);
      kept_mass = cum;
    }
  }
  const double target = u * kept_mass;
  auto [tok, cum] = Crossing(kept, prob, before, [target](double c) { return target < c; });
  (void)cum;
  if (tok >= 0) return tok;
  // Rounding left the draw past the end: the last kept token, as cpu::Sample returns.
  return *std::min_element(kept.begin(), kept.end(), [&](int32_t a, int32_t b) { return before(b, a); });
}

SampleResult SampleToken(float* logits, int64_t vocab, const SamplingParams& params,
                         const std::unordered_map<int32_t, int>& counts, uint64_t seed,
                         uint64_t step) {
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    for (const auto& [tok, c] : counts) {
      if (tok < 0 || tok >= vocab || c <= 0) continue;
      logits[tok] -= params.presence_penalty + params.frequency_penalty * static_cast<float>(c);
    }
  }
  SampleResult r;
  r.token = FastSample(logits, vocab, params.temperature, params.top_p, params.top_k, seed, step);
  if (params.logprobs >= 0) {
    std::vector<float> lp(vocab);
    LogSoftmax(logits, vocab, lp.data());
    r.has_logprobs = true;
    r.logprobs.token = r.token;
    r.logprobs.logprob = lp[r.token];
    const int k = static_cast<int>(std::min<int64_t>(params.logprobs, vocab));
    if (k > 0) {
      std::vector<int32_t> idx(vocab);
      for (int64_t i = 0; i < vocab; ++i) idx[i] = static_cast<int32_t>(i);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
      });
      for (int i = 0; i < k; ++i) r.logprobs.top.emplace_back(idx[i], lp[idx[i]]);
    }
  }
  return r;
}

}  // namespace ds
