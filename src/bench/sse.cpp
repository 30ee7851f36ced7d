#include "bench/sse.h"

#include <nlohmann/json.hpp>

namespace ds::bench {

void SseParser::Feed(std::string_view bytes, std::vector<std::string>* events) {
  for (char c : bytes) {
    if (c == '\n') {
      if (last_was_cr_) {  // second half of "\r\n": the line was already processed
        last_was_cr_ = false;
        continue;
      }
      ProcessLine(events);
    } else if (c == '\r') {
      ProcessLine(events);
      last_was_cr_ = true;
      continue;
    } else {
      line_.push_back(c);
    }
    last_was_cr_ = false;
  }
}

void SseParser::Finish(std::vector<std::string>* events) {
  if (!line_.empty()) ProcessLine(events);
  if (has_data_) {
    events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
  }
}

void SseParser::ProcessLine(std::vector<std::string>* events) {
  std::string line = std::move(line_);
  line_.clear();
  if (line.empty()) {  // dispatch
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // comment
  std::string_view field(line), value;
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    field = std::string_view(line).substr(0, colon);
    value = std::string_view(line).substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field != "data") return;
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

namespace {
std::optional<int> IntField(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int>();
}
std::string StringField(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return "";
  return it->get<std::string>();
}
}  // namespace

StatusOr<StreamChunk> ParseStreamChunk(std::string_view data) {
  StreamChunk chunk;
  // Trim surrounding whitespace for the sentinel check.
  size_t b = data.find_first_not_of(" \t\r\n");
  size_t e = data.find_last_not_of(" \t\r\n");
  std::string_view trimmed = b == std::string_view::npos ? std::string_view() : data.substr(b, e - b + 1);
  if (trimmed == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  nlohmann::json j = nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("stream chunk is not a JSON object: '" +
                           std::string(trimmed.substr(0, 80)) + "'");
  if (auto it = j.find("error"); it != j.end() && !it->is_null()) {
    if (it->is_object())
      chunk.error = StringField(*it, "message");
    else if (it->is_string())
      chunk.error = it->get<std::string>();
    if (chunk.error.empty()) chunk.error = it->dump();
    return chunk;
  }
  if (auto it = j.find("choices"); it != j.end() && it->is_array() && !it->empty()) {
    const auto& c0 = (*it)[0];
    chunk.has_choice = true;
    if (c0.is_object()) {
      // A token event: non-empty text, or an empty text field in a chunk that is neither
      // the chat role preamble nor a bare finish marker (a token that decodes to no text
      // yet, e.g. a partial UTF-8 sequence, still arrived at this time).
      bool text_field = false, role_only = false;
      if (auto t = c0.find("text"); t != c0.end() && t->is_string()) {
        chunk.text = t->get<std::string>();
        text_field = true;
      } else if (auto d = c0.find("delta"); d != c0.end() && d->is_object()) {
        chunk.text = StringField(*d, "content");
        if (chunk.text.empty()) chunk.text = StringField(*d, "reasoning_content");
        text_field = d->contains("content") || d->contains("reasoning_content");
        role_only = d->contains("role");
      }
      chunk.finish_reason = StringField(c0, "finish_reason");
      if (auto ids = c0.find("token_ids"); ids != c0.end() && ids->is_array())
        chunk.num_token_ids = static_cast<int>(ids->size());
      chunk.has_content = !chunk.text.empty() || chunk.num_token_ids > 0 ||
                          (text_field && !role_only && chunk.finish_reason.empty() && chunk.num_token_ids != 0);
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    chunk.completion_tokens = IntField(*u, "completion_tokens");
    chunk.prompt_tokens = IntField(*u, "prompt_tokens");
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
      chunk.cached_tokens = IntField(*d, "cached_tokens");
  }
  return chunk;
}

}  // namespace ds::bench
