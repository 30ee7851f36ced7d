// Chat templates: renders an OpenAI-style message list to the prompt text a model expects.
//
// The DeepSeek-V3 template (tokenizer_config.json "chat_template" of deepseek-ai/DeepSeek-V3)
// is rendered natively: ApplyDeepSeekV3 reproduces that Jinja template's output exactly,
// quirks included (system prompts joined with "\n\n" and put after BOS; the namespace flags
// is_first / is_output_first are never reset between turns, as in the original). A model
// directory's own template is used when it differs: FromTokenizer compares the directory's
// template with the known one (after trimming surrounding whitespace); any other template is
// rendered by the Jinja subset interpreter (jinja.h) in transformers' environment, and one
// outside that subset fails at load with Unimplemented naming the construct and the template.
//
// Message fields used: role (system|user|assistant|tool), content (string, null, or an array
// of {"type":"text","text":...} parts which are concatenated), tool_calls
// ([{"type":"function","function":{"name":..., "arguments": string|object}}]; an object is
// serialised compactly). Errors (InvalidArgument): not an array, a message without a string
// role, a content of another type.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "server/jinja.h"
#include "server/tokenizer.h"

namespace ds {

class ChatTemplate {
 public:
  enum class Kind { kDeepSeekV3, kJinja };

  // The template of a loaded tokenizer directory (tokenizer_config.json chat_template).
  static StatusOr<std::unique_ptr<ChatTemplate>> FromTokenizer(const Tokenizer& tok);
  // From the template text and the bos token string it renders.
  // force_jinja: use the interpreter even for the known DeepSeek-V3 text (tests).
  static StatusOr<std::unique_ptr<ChatTemplate>> FromString(const std::string& template_text,
                                                            const std::string& bos_token,
                                                            const std::string& eos_token = "",
                                                            bool force_jinja = false);
  ~ChatTemplate();

  // Renders messages (JSON array). tools: JSON array or null (the DeepSeek-V3 template does
  // not render tool definitions; they are accepted and ignored, as the template ignores them).
  StatusOr<std::string> Apply(const nlohmann::json& messages, bool add_generation_prompt,
                              const nlohmann::json& tools = nlohmann::json()) const;
  // Same with key order kept (Jinja templates that print dicts, e.g. tools | tojson, print
  // keys in this order, as Python does). extra: more template variables (object or null).
  StatusOr<std::string> Apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                              const nlohmann::ordered_json& tools,
                              const nlohmann::ordered_json& extra = nlohmann::ordered_json()) const;

  Kind kind() const { return kind_; }

  // The known DeepSeek-V3 template text (for tests and detection).
  static const std::string& DeepSeekV3Template();

 private:
  ChatTemplate() = default;
  Kind kind_ = Kind::kDeepSeekV3;
  std::string bos_token_, eos_token_;
  std::unique_ptr<jinja::Template> jinja_;
};

}  // namespace ds
