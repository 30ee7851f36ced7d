// Incremental detokenization of a sequence's generated tokens, and stop-string matching over
// the resulting text. Both run on the engine thread, once per sampled token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ds {

// Decodes token ids to UTF-8 text. Implementations replace invalid UTF-8 with U+FFFD and
// must be safe to call concurrently (const).
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
};

// vLLM-style prefix/read offsets: text of a new token = Decode(ids[prefix:]) minus
// Decode(ids[prefix:read]); a delta ending in U+FFFD (an incomplete multi-byte character,
// or genuinely invalid bytes) is held back until more tokens arrive or Flush().
class DeltaDetokenizer {
 public:
  DeltaDetokenizer(const TokenDecoder* decoder, bool skip_special_tokens)
      : decoder_(decoder), skip_special_(skip_special_tokens) {}
  // Adds one token; returns the newly complete text (possibly empty).
  std::string Add(int32_t token);
  // Everything still held back (invalid bytes come out as U+FFFD).
  std::string Flush();
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  const TokenDecoder* decoder_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0, read_ = 0;
};

// Stop strings over a growing text. Stop strings are excluded from the output (OpenAI).
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);
  struct Result {
    std::string emit;                  // text that is now safe to send
    std::optional<std::string> stop;   // set when a stop string matched (text ends before it)
  };
  // Appends `delta` to the text and returns what can be emitted: everything up to a matched
  // stop string, else everything except the longest suffix that is a prefix of a stop string.
  Result Append(const std::string& delta);
  // At the end of generation: the held-back tail (no stop matched).
  std::string Flush();
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

// Length of the longest suffix of `text` that is a proper prefix of one of `stops`.
size_t StopPrefixHoldback(const std::string& text, const std::vector<std::string>& stops);

}  // namespace ds

namespace ds {
// Replaces each maximal invalid UTF-8 subsequence with U+FFFD (one per offending byte run
// start, as WHATWG/Python "replace"). Valid input is returned unchanged.
std::string SanitizeUtf8(const std::string& s);
}  // namespace ds
