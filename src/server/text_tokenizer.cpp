#include "server/text_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "common/utf8.h"

namespace ds {

namespace {
std::string ContentText(const nlohmann::json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  std::string out;
  if (c.is_array()) {
    for (const auto& part : c) {
      if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
          part["text"].is_string())
        out += part["text"].get<std::string>();
    }
  }
  return out;
}
}  // namespace

StatusOr<std::string> RenderDeepSeekV3Chat(const nlohmann::json& messages,
                                           const nlohmann::json& tools,
                                           const ChatTemplateOptions& opts,
                                           const std::string& bos, const std::string& eos) {
  if (!messages.is_array() || messages.empty())
    return InvalidArgument("'messages' must be a non-empty array");
  std::string system;
  bool first_sp = true;
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return InvalidArgument("each message must be an object with a string 'role'");
    const std::string role = m["role"];
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
        role != "developer")
      return InvalidArgument("unknown message role '" + role + "'");
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string() &&
        !m["content"].is_array())
      return InvalidArgument("message 'content' must be a string or an array of parts");
    if (role == "system" || role == "developer") {
      system += (first_sp ? "" : "\n\n") + ContentText(m.value("content", nlohmann::json()));
      first_sp = false;
    }
  }
  (void)tools;  // the DeepSeek-V3 template renders no tool definitions (HF semantics)
  std::string out = bos + system;
  bool is_tool = false, output_first = true;
  const size_t last = messages.size() - 1;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string role = m["role"];
    const bool open_end = opts.continue_final_message && i == last && role == "assistant";
    if (role == "user") {
      is_tool = false;
      out += "<｜User｜>" + ContentText(m.value("content", nlohmann::json()));
    } else if (role == "assistant") {
      const bool has_content = m.contains("content") && !m["content"].is_null();
      if (!has_content && m.contains("tool_calls") && m["tool_calls"].is_array()) {
        is_tool = false;
        bool first = true;
        for (const auto& tc : m["tool_calls"]) {
          if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
            return InvalidArgument("malformed assistant tool_calls");
          const auto& f = tc["function"];
          std::string args = f.contains("arguments") && f["arguments"].is_string()
                                 ? f["arguments"].get<std::string>() : "{}";
          std::string call = std::string(first ? "<｜Assistant｜><｜tool▁calls▁begin｜>" : "\n") +
                             "<｜tool▁call▁begin｜>" + tc.value("type", "function") + "<｜tool▁sep｜>" +
                             f.value("name", "") + "\n```json\n" + args + "\n```<｜tool▁call▁end｜>";
          out += call;
          first = false;
        }
        out += "<｜tool▁calls▁end｜>" + eos;
      } else {
        std::string content = ContentText(m.value("content", nlohmann::json()));
        if (is_tool) {
          out += "<｜tool▁outputs▁end｜>" + content + (open_end ? "" : eos);
          is_tool = false;
        } else {
          out += "<｜Assistant｜>" + content + (open_end ? "" : eos);
        }
      }
    } else if (role == "tool") {
      is_tool = true;
      std::string content = ContentText(m.value("content", nlohmann::json()));
      if (output_first) {
        out += "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" + content + "<｜tool▁output▁end｜>";
        output_first = false;
      } else {
        out += "\n<｜tool▁output▁begin｜>" + content + "<｜tool▁output▁end｜>";
      }
    }
  }
  if (is_tool) out += "<｜tool▁outputs▁end｜>";
  const bool ends_open = opts.continue_final_message && messages[last]["role"] == "assistant";
  if (opts.add_generation_prompt && !is_tool && !ends_open) out += "<｜Assistant｜>";
  return out;
}

namespace {
// Bytes are ids 0..255; DeepSeek-V3's marker strings are single ids from 256 on (BOS and EOS
// are "special": dropped by skip_special_tokens; the rest are ordinary added tokens, as in V3).
const char* const kByteSpecials[] = {
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>"};
constexpr int kNumByteSpecials = sizeof(kByteSpecials) / sizeof(kByteSpecials[0]);

class ByteTokenizer : public TextTokenizer {
 public:
  explicit ByteTokenizer(int vocab) : vocab_(vocab) {
    bytes_.resize(std::max(vocab, 256 + kNumByteSpecials));
    for (int id = 0; id < static_cast<int>(bytes_.size()); ++id)
      bytes_[id] = id < 256 ? std::string(1, static_cast<char>(id))
                   : id < 256 + kNumByteSpecials ? std::string(kByteSpecials[id - 256])
                                                 : "<|" + std::to_string(id) + "|>";
  }
  StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(256);
    for (size_t i = 0; i < text.size();) {
      int hit = -1;
      if (text[i] == '<')
        for (int k = 0; k < kNumByteSpecials; ++k)
          if (text.compare(i, std::strlen(kByteSpecials[k]), kByteSpecials[k]) == 0) { hit = k; break; }
      if (hit >= 0) {
        ids.push_back(256 + hit);
        i += std::strlen(kByteSpecials[hit]);
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]));
        ++i;
      }
    }
    return ids;
  }
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 256) s.push_back(static_cast<char>(id));
      else if (id < 256 + kNumByteSpecials) {
        if (!(skip_special && id <= 257)) s += kByteSpecials[id - 256];
      } else if (!skip_special) {
        s += "<|" + std::to_string(id) + "|>";
      }
    }
    return Utf8Lossy(s);
  }
  std::string_view TokenBytes(int32_t id, bool skip_special) const override {
    if (id < 0 || id >= static_cast<int32_t>(bytes_.size())) return {};
    if (skip_special && (id == 256 || id == 257 || id >= 256 + kNumByteSpecials)) return {};
    return bytes_[id];
  }
  std::string TokenText(int32_t id) const override { return Decode({id}, false); }
  int vocab_size() const override { return vocab_; }
  std::vector<int32_t> eos_token_ids() const override { return {257}; }
  StatusOr<std::string> ApplyChatTemplate(const nlohmann::json& messages, const nlohmann::json& tools,
                                          const ChatTemplateOptions& opts) const override {
    return RenderDeepSeekV3Chat(messages, tools, opts, kByteSpecials[0], kByteSpecials[1]);
  }

 private:
  int vocab_;
  std::vector<std::string> bytes_;  // per id, as Decode renders it
};
}  // namespace

std::unique_ptr<TextTokenizer> MakeByteTokenizer(int vocab_size) {
  return std::make_unique<ByteTokenizer>(vocab_size);
}

}  // namespace ds
