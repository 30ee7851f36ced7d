// Byte-level BPE tokenizer loaded from a Hugging Face model directory (tokenizer.json +
// tokenizer_config.json), bit-exact with HF `tokenizers` for the DeepSeek-V3/R1 tokenizer.
//
// What it implements (the parts of tokenizer.json the file declares, HF semantics):
//   - normalizer: none / empty Sequence (anything else -> Unimplemented at Load);
//   - added tokens (special and not): matched before pre-tokenization with a leftmost-longest
//     scan, first the non-normalized ones then the normalized ones, honouring
//     lstrip/rstrip/single_word; special tokens in text are recognised unless
//     parse_special=false (HF `encode_special_tokens`);
//   - pre_tokenizer: Sequence of Split (Regex or String pattern, behaviours Isolated, Removed,
//     MergedWithPrevious, MergedWithNext, Contiguous, invert), Digits and ByteLevel
//     (add_prefix_space, use_regex with the GPT-2 pattern). Regexes are Oniguruma syntax in
//     the file; they are translated to PCRE2 (UTF+UCP, JIT) with Oniguruma's meaning of \s,
//     \S, \d, \w, \h kept (see TranslateOnigToPcre2 in tokenizer.cpp);
//   - model BPE: merges applied lowest rank first (ties: leftmost), like HF's word.merge_all;
//   - post-processing: BOS/EOS per tokenizer_config.json add_bos_token/add_eos_token when
//     add_special_tokens (what transformers' LlamaTokenizerFast does), or the tokenizer.json
//     TemplateProcessing single template when the file declares one;
//   - decoder ByteLevel: each token's characters are mapped back to bytes (tokens with a
//     character outside the byte map, e.g. "<｜User｜>", contribute their UTF-8 as is), the
//     bytes are joined and invalid UTF-8 becomes U+FFFD per maximal subpart (Rust's
//     String::from_utf8_lossy, which HF uses).
// Thread safety: a loaded Tokenizer is immutable; Encode/Decode may run concurrently
// (the per-word BPE cache is thread-local).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/utf8.h"
#include "scheduler/detokenizer.h"

namespace ds {

class Tokenizer : public TokenDecoder {
 public:
  struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool single_word = false;
  };

  // Loads <dir>/tokenizer.json and (optional) <dir>/tokenizer_config.json.
  // Errors: NotFound (no tokenizer.json), DataLoss (bad JSON), Unimplemented (a model type,
  // normalizer, pre-tokenizer or decoder this implementation does not support).
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir);
  // Same, from the two files' contents (config_json may be empty).
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(const std::string& tokenizer_json,
                                                       const std::string& config_json);
  ~Tokenizer();

  // text: UTF-8 (invalid sequences are first replaced by U+FFFD, as a Python str would need).
  // add_special_tokens: prepend BOS / append EOS per tokenizer_config (see above).
  // parse_special: recognise special added tokens written in the text (default, HF default).
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = false,
                              bool parse_special = true) const;
  // Ids out of range are skipped (as HF does). skip_special drops special added tokens.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // TokenDecoder (the engine's incremental detokenizer).
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    return Decode(std::span<const int32_t>(ids), skip_special_tokens);
  }

  // The raw bytes one token contributes to a decode (empty for unknown ids, or for special
  // tokens when skip_special). Used by DeltaDetokenizer (scheduler/detokenizer.h).
  std::string_view TokenBytes(int32_t id, bool skip_special = false) const override;
  // The vocabulary string of an id (byte-level form, e.g. "Ġthe"); nullopt if unknown.
  std::optional<std::string> IdToToken(int32_t id) const;
  std::optional<int32_t> TokenToId(std::string_view token) const;
  bool IsSpecial(int32_t id) const;

  // One past the largest id (base vocab + added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  bool add_bos_token() const { return add_bos_; }
  // tokenizer_config.json "chat_template" (empty if none).
  const std::string& chat_template() const { return chat_template_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  struct Impl;  // pre-tokenizer, merge table, added-token matcher (tokenizer.cpp)

 private:
  Tokenizer();
  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const;
  void BpeWord(std::string_view word, std::vector<int32_t>* out) const;

  std::unique_ptr<Impl> impl_;
  std::vector<std::string> id_to_token_;   // byte-level vocabulary strings
  std::vector<std::string> id_to_bytes_;   // decoded bytes per id
  std::vector<uint8_t> is_special_;
  std::vector<AddedToken> added_;
  std::optional<int32_t> bos_id_, eos_id_;
  std::string bos_token_, eos_token_, chat_template_;
  bool add_bos_ = false, add_eos_ = false;
  uint64_t uid_ = 0;  // distinguishes instances for the thread-local word cache
};


}  // namespace ds
