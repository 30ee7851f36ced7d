// Per-sequence sampling and stopping parameters (validated by the server before they reach
// the engine; the engine trusts them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ds {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // 0 = all
  std::optional<uint64_t> seed;  // none: a random seed is drawn at admission
  float presence_penalty = 0.0f;   // [-2, 2], OpenAI semantics, over generated tokens
  float frequency_penalty = 0.0f;  // [-2, 2]
  int max_tokens = 16;       // >= 1
  int min_tokens = 0;        // EOS / stop tokens ignored before this many outputs
  bool ignore_eos = false;
  std::vector<std::string> stop;         // stop strings (excluded from the output)
  std::vector<int32_t> stop_token_ids;   // stop tokens (excluded from the text)
  int logprobs = -1;         // -1: none; k >= 0: the sampled token's logprob + top k
  bool skip_special_tokens = true;
};

}  // namespace ds
