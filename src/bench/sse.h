// Server-sent events (the `text/event-stream` framing of OpenAI streaming responses) and the
// parsing of one OpenAI streaming chunk.
//
// SseParser follows the WHATWG event-stream rules the OpenAI servers rely on: lines end in
// "\n", "\r\n" or "\r"; "data:" lines (one optional space after the colon) are joined with
// "\n"; a blank line dispatches the event; lines starting with ":" are comments; other
// fields (event:, id:, retry:) are ignored. Bytes may arrive split anywhere, including inside
// a "\r\n" pair.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ds::bench {

class SseParser {
 public:
  // Consumes `bytes`; appends the data payload of every completed event to `events`.
  void Feed(std::string_view bytes, std::vector<std::string>* events);
  // Flushes a final event not terminated by a blank line (stream closed), if any.
  void Finish(std::vector<std::string>* events);
  // Bytes buffered in an unfinished line (a guard against a server that never sends "\n").
  size_t buffered() const { return line_.size() + data_.size(); }

 private:
  void ProcessLine(std::vector<std::string>* events);
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool last_was_cr_ = false;
};

// What one chunk of /v1/completions or /v1/chat/completions streaming carries.
struct StreamChunk {
  bool done = false;              // the "[DONE]" sentinel
  bool has_content = false;       // a token event: non-empty text, or an empty text field
                                  // outside the chat role preamble and the finish marker
  std::string text;               // that text (choices[0].text | delta.content | delta.reasoning_content)
  std::optional<int> completion_tokens;  // usage.completion_tokens
  std::optional<int> prompt_tokens;      // usage.prompt_tokens
  std::optional<int> cached_tokens;      // usage.prompt_tokens_details.cached_tokens
  bool has_choice = false;        // a non-empty "choices" array (token, preamble or finish)
  int num_token_ids = -1;         // choices[0].token_ids length when present (vLLM's
                                  // return_token_ids extension): tokens in this chunk
  std::string finish_reason;
  std::string error;              // an {"error": ...} chunk's message
};

// Parses one SSE data payload. Invalid JSON -> INVALID_ARGUMENT naming the payload start.
StatusOr<StreamChunk> ParseStreamChunk(std::string_view data);

}  // namespace ds::bench
