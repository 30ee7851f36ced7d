// LoadTextTokenizer: the TextTokenizer adapter over the Hugging Face byte-level BPE tokenizer
// (server/tokenizer.h) and its chat template (server/chat_template.h). The chat prompt comes
// from the checkpoint's template via ChatTemplate; continue_final_message (not a template
// feature) is rendered by RenderDeepSeekV3Chat, the same layout.
#include "server/text_tokenizer.h"

#include "server/chat_template.h"
#include "server/tokenizer.h"

namespace ds {

namespace {
class HfTextTokenizer : public TextTokenizer {
 public:
  HfTextTokenizer(std::unique_ptr<Tokenizer> tok, std::unique_ptr<ChatTemplate> tmpl)
      : tok_(std::move(tok)), tmpl_(std::move(tmpl)) {}
  StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_special) const override {
    return tok_->Encode(text, add_special);
  }
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    return tok_->Decode(ids, skip_special);
  }
  std::string_view TokenBytes(int32_t id, bool skip_special) const override { return tok_->TokenBytes(id, skip_special); }
  std::string TokenText(int32_t id) const override { return Utf8Lossy(tok_->TokenBytes(id, false)); }
  int vocab_size() const override { return tok_->vocab_size(); }
  std::vector<int32_t> eos_token_ids() const override {
    if (auto e = tok_->eos_id()) return {*e};
    return {};
  }
  StatusOr<std::string> ApplyChatTemplate(const nlohmann::json& messages, const nlohmann::json& tools,
                                          const ChatTemplateOptions& opts) const override {
    // Validate the message list first (clear 400s for malformed input).
    DS_ASSIGN_OR_RETURN(std::string own, RenderDeepSeekV3Chat(messages, tools, opts, tok_->bos_token(),
                                                               tok_->eos_token()));
    if (opts.continue_final_message || !tmpl_) return own;
    return tmpl_->Apply(messages, opts.add_generation_prompt, tools);
  }

 private:
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> tmpl_;
};
}  // namespace

StatusOr<std::unique_ptr<TextTokenizer>> LoadTextTokenizer(const std::string& dir) {
  DS_ASSIGN_OR_RETURN(auto tok, Tokenizer::Load(dir));
  std::unique_ptr<ChatTemplate> tmpl;
  if (!tok->chat_template().empty()) {
    auto t = ChatTemplate::FromTokenizer(*tok);
    if (t.ok()) tmpl = std::move(t).value();
    // An unsupported template falls back to the built-in DeepSeek-V3 layout.
  }
  return std::unique_ptr<TextTokenizer>(std::make_unique<HfTextTokenizer>(std::move(tok), std::move(tmpl)));
}

}  // namespace ds
