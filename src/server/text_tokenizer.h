// TextTokenizer: what the OpenAI layer needs from a tokenizer (encode, decode, chat
// template, special ids). Implementations: the real Hugging Face tokenizer adapter
// (server/hf_text_tokenizer.cpp, over server/tokenizer.h) and ByteTokenizer (bytes as ids,
// for tests that run without tokenizer files).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "scheduler/detokenizer.h"

namespace ds {

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // render the last (assistant) message open-ended
};

class TextTokenizer : public TokenDecoder {
 public:
  virtual StatusOr<std::vector<int32_t>> Encode(const std::string& text,
                                                bool add_special_tokens) const = 0;
  // Text of one token for logprobs (raw bytes may be partial UTF-8: sanitised).
  virtual std::string TokenText(int32_t id) const = 0;
  virtual int vocab_size() const = 0;
  virtual std::vector<int32_t> eos_token_ids() const = 0;
  // Renders OpenAI chat `messages` (and `tools`, may be null) to the prompt text.
  // INVALID_ARGUMENT on a malformed message list.
  virtual StatusOr<std::string> ApplyChatTemplate(const nlohmann::json& messages,
                                                  const nlohmann::json& tools,
                                                  const ChatTemplateOptions& opts) const = 0;
};

// ids 0..255 are bytes; 256.. are DeepSeek-V3's marker strings (256 BOS, 257 EOS, 258
// <｜User｜>, 259 <｜Assistant｜>, 260.. tool-call markers); DeepSeek-V3 chat layout. For tests
// and `--tokenizer byte`.
std::unique_ptr<TextTokenizer> MakeByteTokenizer(int vocab_size);

// Loads the tokenizer in `dir` (tokenizer.json + tokenizer_config.json).
StatusOr<std::unique_ptr<TextTokenizer>> LoadTextTokenizer(const std::string& dir);

// DeepSeek-V3 chat layout rendered in C++ (the checkpoint's Jinja template, same output):
// BOS + system prompts, <｜User｜>..., <｜Assistant｜>...<｜end▁of▁sentence｜>, tool calls and
// tool outputs. `bos`/`eos` are the special token texts. `tools` are accepted and not
// rendered, exactly as the checkpoint's template does. continue_final_message leaves the
// last assistant message open (no EOS, no generation prompt).
StatusOr<std::string> RenderDeepSeekV3Chat(const nlohmann::json& messages,
                                           const nlohmann::json& tools,
                                           const ChatTemplateOptions& opts,
                                           const std::string& bos, const std::string& eos);

}  // namespace ds
