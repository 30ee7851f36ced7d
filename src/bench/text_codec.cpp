// TextCodec over dsinfer's Hugging Face tokenizer (server/tokenizer.h).
#include "bench/serve_bench.h"

#include <span>

#include "server/tokenizer.h"

namespace ds::bench {
namespace {
class TokenizerCodec : public TextCodec {
 public:
  explicit TokenizerCodec(std::unique_ptr<Tokenizer> t) : t_(std::move(t)) {}
  // User text: no BOS/EOS added, special-token strings in the text are plain text.
  std::vector<int32_t> Encode(const std::string& text) const override {
    return t_->Encode(text, /*add_special_tokens=*/false, /*parse_special=*/false);
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    return t_->Decode(std::span<const int32_t>(ids.data(), ids.size()), /*skip_special=*/false);
  }
  int vocab_size() const override { return t_->vocab_size(); }

 private:
  std::unique_ptr<Tokenizer> t_;
};
}  // namespace

StatusOr<std::unique_ptr<TextCodec>> LoadTextCodec(const std::string& dir) {
  DS_ASSIGN_OR_RETURN(auto t, Tokenizer::Load(dir));
  return std::unique_ptr<TextCodec>(std::make_unique<TokenizerCodec>(std::move(t)));
}

}  // namespace ds::bench
