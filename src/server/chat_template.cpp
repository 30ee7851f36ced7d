// Chat templates (see chat_template.h).
#include "server/chat_template.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace ds {

using json = nlohmann::json;

namespace {

// deepseek-ai/DeepSeek-V3 tokenizer_config.json "chat_template", verbatim.
const char* const kDeepSeekV3Template = R"TPL({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.system_prompt + '

' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '
' + '```json' + '
' + tool['function']['arguments'] + '
' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'
' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '
' + '```json' + '
' + tool['function']['arguments'] + '
' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'
<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %})TPL";

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// FNV-1a of the template text, to name an unsupported template in the error.
std::string TemplateId(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A message's content as the template sees it: nullopt for null/absent ("is none"), the
// string, or the concatenated text parts.
Status ContentOf(const json& m, std::optional<std::string>* out, bool* present) {
  *present = m.contains("content");
  if (!*present || m["content"].is_null()) {
    out->reset();
    return Status::Ok();
  }
  const json& c = m["content"];
  if (c.is_string()) {
    *out = c.get<std::string>();
    return Status::Ok();
  }
  if (c.is_array()) {
    std::string s;
    for (const auto& part : c) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string())
        return InvalidArgument("chat template: only text content parts are supported");
      s += part["text"].get<std::string>();
    }
    *out = s;
    return Status::Ok();
  }
  return InvalidArgument("chat template: message content must be a string, null or an array of text parts");
}

}  // namespace

const std::string& ChatTemplate::DeepSeekV3Template() {
  static const std::string s = kDeepSeekV3Template;
  return s;
}

StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromTokenizer(const Tokenizer& tok) {
  if (tok.chat_template().empty())
    return NotFound("the tokenizer directory has no chat_template in tokenizer_config.json");
  return FromString(tok.chat_template(), tok.bos_token(), tok.eos_token());
}

ChatTemplate::~ChatTemplate() = default;

StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromString(const std::string& text,
                                                                 const std::string& bos_token,
                                                                 const std::string& eos_token,
                                                                 bool force_jinja) {
  auto ct = std::unique_ptr<ChatTemplate>(new ChatTemplate);
  ct->bos_token_ = bos_token;
  ct->eos_token_ = eos_token;
  if (!force_jinja && Trim(text) == Trim(DeepSeekV3Template())) {
    ct->kind_ = Kind::kDeepSeekV3;
    return ct;
  }
  auto t = jinja::Template::Compile(text);
  if (!t.ok()) {
    std::string head = text.substr(0, std::min<size_t>(text.size(), 80));
    for (auto& ch : head)
      if (ch == '\n') ch = ' ';
    return Status(t.status().code(), "chat template " + TemplateId(text) + " (" +
                                         std::to_string(text.size()) + " chars, starting \"" + head +
                                         "\") cannot be rendered: " + t.status().message());
  }
  ct->kind_ = Kind::kJinja;
  ct->jinja_ = std::move(t).value();
  return ct;
}

StatusOr<std::string> ChatTemplate::Apply(const nlohmann::ordered_json& messages,
                                          bool add_generation_prompt,
                                          const nlohmann::ordered_json& tools,
                                          const nlohmann::ordered_json& extra) const {
  if (kind_ == Kind::kDeepSeekV3) return Apply(json(messages), add_generation_prompt, json(tools));
  if (!messages.is_array()) return InvalidArgument("chat template: messages must be a JSON array");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_token_;
  ctx["eos_token"] = eos_token_;
  // transformers passes tools=None and documents=None when absent (so `tools is defined`).
  ctx["tools"] = tools;
  if (!ctx.contains("documents")) ctx["documents"] = nullptr;
  return jinja_->Render(ctx);
}

StatusOr<std::string> ChatTemplate::Apply(const json& messages, bool add_generation_prompt,
                                          const json& tools) const {
  if (kind_ == Kind::kJinja)
    return Apply(nlohmann::ordered_json(messages), add_generation_prompt, nlohmann::ordered_json(tools));
  if (!messages.is_array()) return InvalidArgument("chat template: messages must be a JSON array");
  for (const auto& m : messages)
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return InvalidArgument("chat template: every message needs a string 'role'");
  // Namespace of the original template.
  bool is_first = false, is_tool = false, is_output_first = true, is_first_sp = true;
  std::string system_prompt;
  for (const auto& m : messages) {
    if (m["role"] != "system") continue;
    std::optional<std::string> c;
    bool present;
    DS_RETURN_IF_ERROR(ContentOf(m, &c, &present));
    if (!c) return InvalidArgument("chat template: a system message needs a string content");
    if (is_first_sp) {
      system_prompt += *c;
      is_first_sp = false;
    } else {
      system_prompt += "\n\n" + *c;
    }
  }
  std::string out = bos_token_ + system_prompt;
  for (const auto& m : messages) {
    const std::string role = m["role"].get<std::string>();
    std::optional<std::string> content;
    bool present;
    DS_RETURN_IF_ERROR(ContentOf(m, &content, &present));
    if (role == "user") {
      if (!content) return InvalidArgument("chat template: a user message needs a string content");
      is_tool = false;
      out += "<｜User｜>" + *content;
    }
    // `message['content'] is none` is false for an absent key (Jinja Undefined).
    if (role == "assistant" && present && !content) {
      is_tool = false;
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (!m["tool_calls"].is_array())
          return InvalidArgument("chat template: tool_calls must be an array");
        for (const auto& tc : m["tool_calls"]) {
          if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
            return InvalidArgument("chat template: a tool call needs a 'function' object");
          const json& fn = tc["function"];
          std::string type = tc.value("type", "function");
          if (!fn.contains("name") || !fn["name"].is_string())
            return InvalidArgument("chat template: a tool call function needs a string 'name'");
          std::string args;
          if (fn.contains("arguments") && fn["arguments"].is_string()) args = fn["arguments"].get<std::string>();
          else if (fn.contains("arguments")) args = fn["arguments"].dump();
          else return InvalidArgument("chat template: a tool call function needs 'arguments'");
          std::string call = type + "<｜tool▁sep｜>" + fn["name"].get<std::string>() + "\n```json\n" +
                             args + "\n```<｜tool▁call▁end｜>";
          if (!is_first) {
            out += "<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + call;
            is_first = true;
          } else {
            out += "\n<｜tool▁call▁begin｜>" + call + "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>";
          }
        }
      }
    }
    if (role == "assistant" && !(present && !content)) {
      if (!content) return InvalidArgument("chat template: an assistant message needs 'content' (string or null)");
      if (is_tool) {
        out += "<｜tool▁outputs▁end｜>" + *content + "<｜end▁of▁sentence｜>";
        is_tool = false;
      } else {
        out += "<｜Assistant｜>" + *content + "<｜end▁of▁sentence｜>";
      }
    }
    if (role == "tool") {
      if (!content) return InvalidArgument("chat template: a tool message needs a string content");
      is_tool = true;
      if (is_output_first) {
        out += "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" + *content + "<｜tool▁output▁end｜>";
        is_output_first = false;
      } else {
        out += "\n<｜tool▁output▁begin｜>" + *content + "<｜tool▁output▁end｜>";
      }
    }
  }
  if (is_tool) out += "<｜tool▁outputs▁end｜>";
  if (add_generation_prompt && !is_tool) out += "<｜Assistant｜>";
  return out;
}

}  // namespace ds
