// Sampler: turns one row of logits into the next token for one sequence.
// Order: presence/frequency penalties (OpenAI: logit[t] -= presence * (count[t] > 0)
// + frequency * count[t], over generated tokens) -> logprobs (log_softmax of the penalised
// logits, before temperature, as the model's distribution) -> cpu::Sample (temperature,
// top-k, top-p, counter-based RNG from (seed, step)).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scheduler/sampling_params.h"

namespace ds {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // highest first, size = requested k
};

struct SampleResult {
  int32_t token = 0;
  bool has_logprobs = false;
  TokenLogprob logprobs;
};

// cpu::Sample's distribution and RNG (ops.h) without sorting the vocabulary: the same
// probabilities, the same walk order (probability descending, then id) and the same u, but
// the token where the cumulative mass crosses the top-p cut / the draw is found by
// quickselect on cumulative mass (expected O(vocab)). Masses are summed in a different order,
// so the token can differ from cpu::Sample only when the draw lies within rounding (~1e-16)
// of a boundary (tests/scheduler: token-for-token equal over peaked and flat distributions).
int32_t FastSample(const float* logits, int64_t vocab, float temperature, float top_p, int top_k,
                   uint64_t seed, uint64_t step);

// logits: [vocab] fp32, modified in place (penalties). `counts`: generated-token counts.
// `seed` is the sequence's seed, `step` the index of the token being generated.
SampleResult SampleToken(float* logits, int64_t vocab, const SamplingParams& params,
                         const std::unordered_map<int32_t, int>& counts, uint64_t seed,
                         uint64_t step);

// log_softmax over [vocab]; out may alias logits.
void LogSoftmax(const float* logits, int64_t vocab, float* out);

}  // namespace ds
