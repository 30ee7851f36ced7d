// Incremental detokenizer (see detokenizer.h).
#include "server/detokenizer.h"

namespace ds {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok,
                                               std::span<const int32_t> prompt_ids,
                                               bool skip_special)
    : tok_(tok), skip_special_(skip_special) {
  for (int32_t id : prompt_ids) pending_.append(tok_.TokenBytes(id, skip_special_));
  prompt_text_ = Drain();
}

std::string IncrementalDetokenizer::Drain() {
  size_t n = Utf8CompletePrefix(pending_);
  if (n == 0) return {};
  std::string out = Utf8Lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string IncrementalDetokenizer::Push(int32_t id) {
  std::string_view b = tok_.TokenBytes(id, skip_special_);
  if (b.empty()) return {};
  pending_.append(b);
  return Drain();
}

std::string IncrementalDetokenizer::PushAll(std::span<const int32_t> ids) {
  for (int32_t id : ids) pending_.append(tok_.TokenBytes(id, skip_special_));
  return Drain();
}

std::string IncrementalDetokenizer::Finish() {
  std::string out = Utf8Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace ds
