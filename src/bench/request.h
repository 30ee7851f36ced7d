// OpenAI-compatible request bodies for the serving benchmark.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/dataset.h"
#include "common/status.h"

namespace ds::bench {

enum class Backend {
  kCompletions,  // POST /v1/completions, prompt = token id list or text
  kChat,         // POST /v1/chat/completions, one user message (text only)
};
// "openai" | "openai-chat" (vLLM's --backend names); also "completions" | "chat".
StatusOr<Backend> ParseBackend(const std::string& name);

struct RequestBodyOptions {
  Backend backend = Backend::kCompletions;
  std::string model;
  bool ignore_eos = false;     // sends "ignore_eos": true and "min_tokens": output_len
  double temperature = 0.0;
  bool text_prompts = false;   // completions: decode token prompts to text with `codec`
  const TextCodec* codec = nullptr;
  TokenRange range;            // for trace prompt expansion
  uint64_t seed = 0;
  nlohmann::json extra_body = nlohmann::json::object();  // merged last (overrides)
};

// The JSON body for request `index` of the dataset: streamed, with
// stream_options.include_usage so the final chunk reports token counts. A token prompt on
// the chat endpoint (or with text_prompts) is decoded with the codec; without one that is an
// INVALID_ARGUMENT error.
StatusOr<std::string> BuildRequestBody(const RequestBodyOptions& opt, const BenchRequest& r,
                                       uint64_t index);

}  // namespace ds::bench
