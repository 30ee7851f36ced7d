// Benchmark datasets: random token prompts, ShareGPT conversations, and trace replay
// (Mooncake-format JSONL: timestamp ms, input_length, output_length, hash_ids).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace ds::bench {

// Token ids <-> text, for text prompts (chat endpoint, --tokenizer) and ShareGPT lengths.
// Implemented over dsinfer's tokenizer in text_codec.cpp; tests use fakes.
class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> Encode(const std::string& text) const = 0;
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
};

// Token ids drawn for synthetic prompts lie in [lo, hi).
struct TokenRange {
  int32_t lo = 0, hi = 0;
};
// Avoids the ends of the vocabulary, where special tokens live in the DeepSeek tokenizers
// (ids 0..2 and >= 128000 of 129280): [100, vocab - 2000) when vocab >= 4000, else [0, vocab).
TokenRange DefaultTokenRange(int vocab_size);

// One benchmark request. The prompt is held in exactly one form: token ids, text, or
// (trace) hash_ids expanded on demand by MaterializePrompt, so a long trace is not held
// expanded in memory.
struct BenchRequest {
  std::vector<int32_t> prompt_ids;
  std::string prompt_text;
  std::vector<int64_t> hash_ids;
  int input_len = 0;     // prompt tokens (exact for ids/trace; tokenizer count or estimate for text)
  int output_len = 0;    // max_tokens to ask for
  double arrival_s = -1; // trace replay time; < 0 when the schedule comes from --request-rate
};

// Tokens per trace hash block (Mooncake traces: 512).
inline constexpr int kTraceBlockTokens = 512;

// The kTraceBlockTokens tokens hash block `hash_id` expands to: a pure function of
// (hash_id, range, seed), so every request naming the block gets the same tokens.
std::vector<int32_t> TraceBlockTokens(int64_t hash_id, TokenRange range, uint64_t seed);

// Prompt of a trace request: the blocks of `hash_ids` concatenated, trimmed to `input_len`.
// When the blocks cover fewer than input_len tokens, the tail is filled from a stream unique
// to `request_index` (so it is never shared with another request).
std::vector<int32_t> BuildTracePrompt(const std::vector<int64_t>& hash_ids, int input_len,
                                      TokenRange range, uint64_t seed, uint64_t request_index);

// The prompt token ids of `r`: prompt_ids, or the trace expansion of hash_ids
// (request_index = position in the dataset). Empty for text prompts.
std::vector<int32_t> MaterializePrompt(const BenchRequest& r, TokenRange range, uint64_t seed,
                                       uint64_t request_index);

// vLLM-style random dataset: input length uniform in [L*(1-r), L*(1+r)] (at least 1),
// output likewise; token ids uniform in `range`. Deterministic for the seed.
std::vector<BenchRequest> MakeRandomRequests(int n, int input_len, int output_len,
                                             double range_ratio, TokenRange range, uint64_t seed);

// Text for a synthetic token prompt whose re-encoding has about target_len tokens: decode
// `ids`, re-encode, and trim (or extend with the ids' own continuation) to target_len, up to
// 4 rounds (decode/encode are not exact inverses at token seams). Returns the text; the
// final token count goes to *actual_len.
std::string FitTextPrompt(const TextCodec& codec, std::vector<int32_t> ids, int target_len, int* actual_len);

struct ShareGptOptions {
  int num_requests = 0;         // take this many after the seeded shuffle (0 = all)
  int fixed_output_len = 0;     // > 0: ask for this many tokens instead of the reply's length
  uint64_t seed = 0;
  const TextCodec* codec = nullptr;  // exact token counts; null: estimate 4 bytes per token
  bool filter = true;           // vLLM's filter: drop prompt/reply < 4 tokens, prompt > 1024,
                                // prompt + reply > 2048
};
// Reads a ShareGPT JSON array or JSONL file: each entry's "conversations" (or "messages")
// list of {"from"|"role", "value"|"content"}; the first human/user turn is the prompt and the
// following gpt/assistant turn's token length is the output length.
StatusOr<std::vector<BenchRequest>> LoadShareGpt(const std::string& path, const ShareGptOptions& opt);

struct TraceOptions {
  double time_scale = 1.0;  // arrival_s = timestamp_ms / 1000 * time_scale (2 = half the rate)
  double duration_s = 0;    // > 0: only requests with timestamp < duration_s (trace time)
  int max_requests = 0;     // > 0: at most this many (the first ones)
};
struct TraceStats {
  int requests = 0;
  long long input_tokens = 0;
  // Tokens of leading blocks already seen earlier in the replayed part (an infinite prefix
  // cache's hit count), over input tokens: the best hit rate a server could reach.
  long long reusable_prefix_tokens = 0;
  double ideal_prefix_hit_rate() const {
    return input_tokens ? static_cast<double>(reusable_prefix_tokens) / input_tokens : 0.0;
  }
};
// Reads a trace JSONL (timestamp ms, input_length, output_length, optional hash_ids).
// Errors name the line.
StatusOr<std::vector<BenchRequest>> LoadTrace(const std::string& path, const TraceOptions& opt,
                                              TraceStats* stats);

}  // namespace ds::bench
