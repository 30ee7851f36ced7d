// Incremental (streaming) detokenization.
//
// IncrementalDetokenizer is fed generated ids one at a time and returns text deltas that never
// contain a broken UTF-8 sequence: bytes of a character split across tokens are held until the
// character is complete. Invalid UTF-8 (a sequence that can no longer become valid) is emitted
// as U+FFFD per maximal subpart, exactly as Tokenizer::Decode (Rust from_utf8_lossy) would,
// and Finish() flushes a trailing incomplete sequence as U+FFFD. Hence
//   prompt_text + concat(deltas) + Finish() == Decode(prompt_ids + generated_ids)
// where prompt_text = the text of the prompt's complete characters (PromptText()); when the
// prompt ends mid-character, the first delta that completes it carries the whole character.
// Without a prompt, concat(deltas) + Finish() == Decode(generated_ids).
// Not thread-safe (one instance per request); the Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "server/tokenizer.h"

namespace ds {

class IncrementalDetokenizer {
 public:
  // prompt_ids: the starting state (their text is not emitted as deltas).
  IncrementalDetokenizer(const Tokenizer& tok, std::span<const int32_t> prompt_ids = {},
                         bool skip_special = false);

  // Appends one id; returns the newly completed text (possibly empty).
  std::string Push(int32_t id);
  // Appends several ids; returns their delta.
  std::string PushAll(std::span<const int32_t> ids);
  // End of stream: the held incomplete bytes as U+FFFD (empty if none).
  std::string Finish();

  // Text of the prompt's complete characters (decoded from prompt_ids at construction).
  const std::string& PromptText() const { return prompt_text_; }
  // Bytes held because they may be the start of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string Drain();

  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
  std::string prompt_text_;
};

// Longest prefix of `bytes` whose lossy decoding cannot change when more bytes follow (i.e.
// excluding a trailing valid-but-incomplete sequence). Defined in tokenizer.cpp.
size_t Utf8CompletePrefix(std::string_view bytes);

}  // namespace ds
