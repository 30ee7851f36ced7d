#include "scheduler/sampler.h"

#include <algorithm>
#include <cmath>

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
  cpu::SampleParams sp{logits, vocab, params.temperature, params.top_p, params.top_k, seed, step};
  r.token = cpu::Sample(sp);
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
