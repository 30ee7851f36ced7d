// TextCodecs: over dsinfer's Hugging Face tokenizer (server/tokenizer.h), or "byte" for servers
// started with `--tokenizer byte` (ids 0..255 are bytes).
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
// `--tokenizer byte`: a token is a byte. The vocabulary is the 128 ASCII bytes, so random ids
// decode to text that encodes back to exactly the same ids (the server's byte tokenizer reads
// text the same way; its marker ids 256.. never arise from ASCII text).
class ByteCodec : public TextCodec {
 public:
  std::vector<int32_t> Encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids)
      if (id >= 0 && id < 128) s.push_back(static_cast<char>(id));
    return s;
  }
  int vocab_size() const override { return 128; }
};
}  // namespace

StatusOr<std::unique_ptr<TextCodec>> LoadTextCodec(const std::string& dir) {
  if (dir == "byte") return std::unique_ptr<TextCodec>(std::make_unique<ByteCodec>());
  DS_ASSIGN_OR_RETURN(auto t, Tokenizer::Load(dir));
  return std::unique_ptr<TextCodec>(std::make_unique<TokenizerCodec>(std::move(t)));
}

}  // namespace ds::bench
