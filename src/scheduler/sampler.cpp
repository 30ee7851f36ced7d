#include "scheduler/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"

namespace ds {

void LogSoftmax(const float* logits, int64_t vocab, float* out) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < vocab; ++i) out[i] = logits[i] - lse;
}

namespace {
uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

int32_t FastSample(const float* logits, int64_t vocab, float temperature, float top_p, int top_k,
                   uint64_t seed, uint64_t step) {
  if (temperature <= 0.0f) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
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
  const double u = static_cast<double>(SplitMix64(seed ^ SplitMix64(step)) >> 11) * 0x1.0p-53;
  const int64_t K = top_k > 0 ? std::min<int64_t>(top_k, vocab) : vocab;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  // Walks the m best tokens; returns -1 if the answer lies beyond them (m < K only when
  // every token is kept, so the kept mass is the normalised 1).
  auto walk = [&](int64_t m) -> int32_t {
    std::partial_sort(order.begin(), order.begin() + m, order.end(), before);
    double kept_mass = 1.0;
    if (m == K) {
      kept_mass = 0.0;
      for (int64_t i = 0; i < K; ++i) kept_mass += prob[order[i]];
    }
    int64_t keep = K;
    if (top_p > 0.0f && top_p < 1.0f) {
      double cum = 0.0;
      int64_t k = 0;
      while (k < m) {
        cum += prob[order[k]];
        ++k;
        if (cum >= top_p * kept_mass) break;
      }
      if (cum < top_p * kept_mass && m < K) return -1;
      keep = k;
      kept_mass = cum;
    }
    const double target = u * kept_mass;
    double cum = 0.0;
    const int64_t n = std::min(keep, m);
    for (int64_t i = 0; i < n; ++i) {
      cum += prob[order[i]];
      if (target < cum) return order[i];
    }
    return keep <= m ? order[keep - 1] : -1;
  };
  if (K == vocab && K > 256) {
    const int32_t t = walk(256);
    if (t >= 0) return t;
  }
  return walk(K);
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
