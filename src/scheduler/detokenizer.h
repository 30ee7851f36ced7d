// Incremental detokenization of a sequence's generated tokens, and stop-string matching over
// the resulting text. Both run on the engine thread, once per sampled token.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

// Decodes token ids to UTF-8 text (byte-level BPE: a token is a byte string, the text of ids
// is the lossy UTF-8 decoding of their concatenated bytes). Implementations replace invalid
// UTF-8 with U+FFFD and must be safe to call concurrently (const).
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  // Raw bytes of one token (empty for a skipped special token or an unknown id); valid while
  // the decoder lives. Decode(ids) == Utf8Lossy(concatenated TokenBytes).
  virtual std::string_view TokenBytes(int32_t id, bool skip_special_tokens) const = 0;
};

// Incremental (streaming) detokenization, byte-level: each token's bytes are appended and the
// longest prefix whose decoding is final (common/utf8.h Utf8CompletePrefix) is emitted, so a
// delta never holds a broken character: bytes of a character split across tokens wait until
// it is complete; invalid UTF-8 comes out as U+FFFD per maximal subpart exactly as Decode
// would. Hence PromptText() + concat(Add deltas) + Flush() == Decode(prompt + generated).
// When the prompt ends mid-character, the first delta that completes it carries the whole
// character. O(bytes of the token) per Add. One instance per sequence; not thread-safe.
class DeltaDetokenizer {
 public:
  DeltaDetokenizer(const TokenDecoder* decoder, bool skip_special_tokens, std::span<const int32_t> prompt_ids = {});
  // Adds one token; returns the newly complete text (possibly empty).
  std::string Add(int32_t token);
  // End of stream: the held incomplete bytes as U+FFFD (empty if none).
  std::string Flush();
  // Text of the prompt's complete characters (not emitted as a delta).
  const std::string& PromptText() const { return prompt_text_; }
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string Drain();
  const TokenDecoder* decoder_;
  bool skip_special_;
  std::string pending_;
  std::string prompt_text_;
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

