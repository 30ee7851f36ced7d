#include "scheduler/detokenizer.h"

#include <algorithm>

#include "common/utf8.h"

namespace ds {

DeltaDetokenizer::DeltaDetokenizer(const TokenDecoder* decoder, bool skip_special_tokens,
                                   std::span<const int32_t> prompt_ids)
    : decoder_(decoder), skip_special_(skip_special_tokens) {
  for (int32_t id : prompt_ids) pending_.append(decoder_->TokenBytes(id, skip_special_));
  prompt_text_ = Drain();
}

std::string DeltaDetokenizer::Drain() {
  const size_t n = Utf8CompletePrefix(pending_);
  if (n == 0) return {};
  std::string out = Utf8Lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string DeltaDetokenizer::Add(int32_t token) {
  std::string_view b = decoder_->TokenBytes(token, skip_special_);
  if (b.empty()) return {};
  pending_.append(b);
  return Drain();
}

std::string DeltaDetokenizer::Flush() {
  std::string out = Utf8Lossy(pending_);
  pending_.clear();
  return out;
}

size_t StopPrefixHoldback(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    size_t max_k = std::min(text.size(), s.size() - 1);
    for (size_t k = max_k; k > best; --k) {
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        best = k;
        break;
      }
    }
  }
  return best;
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const auto& s : stops_) max_len_ = std::max(max_len_, s.size());
}

StopStringMatcher::Result StopStringMatcher::Append(const std::string& delta) {
  Result r;
  if (stopped_) return r;
  const size_t old_len = text_.size();
  text_ += delta;
  if (!stops_.empty()) {
    // A match must end inside the new text, so it starts at or after old_len - max_len + 1.
    size_t from = old_len + 1 > max_len_ ? old_len + 1 - max_len_ : 0;
    size_t best = std::string::npos;
    const std::string* which = nullptr;
    for (const auto& s : stops_) {
      size_t p = text_.find(s, from);
      if (p != std::string::npos && p < best) { best = p; which = &s; }
    }
    if (which) {
      stopped_ = true;
      text_.resize(best);
      if (best > emitted_) r.emit = text_.substr(emitted_);
      emitted_ = std::max(emitted_, best);
      r.stop = *which;
      return r;
    }
  }
  size_t safe = text_.size() - StopPrefixHoldback(text_, stops_);
  if (safe > emitted_) {
    r.emit = text_.substr(emitted_, safe - emitted_);
    emitted_ = safe;
  }
  return r;
}

std::string StopStringMatcher::Flush() {
  if (stopped_ || emitted_ >= text_.size()) return {};
  std::string rest = text_.substr(emitted_);
  emitted_ = text_.size();
  return rest;
}

}  // namespace ds
