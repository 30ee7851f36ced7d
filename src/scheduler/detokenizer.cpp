#include "scheduler/detokenizer.h"

#include <algorithm>

namespace ds {

namespace {
bool EndsWithReplacementChar(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

std::string DeltaDetokenizer::Add(int32_t token) {
  ids_.push_back(token);
  std::vector<int32_t> prev(ids_.begin() + prefix_, ids_.begin() + read_);
  std::vector<int32_t> all(ids_.begin() + prefix_, ids_.end());
  std::string prefix_text = decoder_->Decode(prev, skip_special_);
  std::string new_text = decoder_->Decode(all, skip_special_);
  if (new_text.size() > prefix_text.size() && !EndsWithReplacementChar(new_text) &&
      new_text.compare(0, prefix_text.size(), prefix_text) == 0) {
    std::string delta = new_text.substr(prefix_text.size());
    prefix_ = read_;
    read_ = ids_.size();
    return delta;
  }
  // Keep the window bounded: if we have held back many tokens of garbage, emit it anyway.
  if (ids_.size() - read_ > 16) return Flush();
  return {};
}

std::string DeltaDetokenizer::Flush() {
  if (read_ == ids_.size()) return {};
  std::vector<int32_t> prev(ids_.begin() + prefix_, ids_.begin() + read_);
  std::vector<int32_t> all(ids_.begin() + prefix_, ids_.end());
  std::string prefix_text = decoder_->Decode(prev, skip_special_);
  std::string new_text = decoder_->Decode(all, skip_special_);
  prefix_ = read_;
  read_ = ids_.size();
  if (new_text.size() > prefix_text.size() &&
      new_text.compare(0, prefix_text.size(), prefix_text) == 0)
    return new_text.substr(prefix_text.size());
  return {};
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

namespace ds {
std::string SanitizeUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) { out.push_back(static_cast<char>(c)); ++i; continue; }
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    if (len == 0) { out += "\xEF\xBF\xBD"; ++i; continue; }
    size_t j = 1;
    for (; j < static_cast<size_t>(len) && i + j < n; ++j) {
      unsigned char cc = p[i + j];
      unsigned char l = (j == 1) ? lo : 0x80, h = (j == 1) ? hi : 0xBF;
      if (cc < l || cc > h) break;
    }
    if (j == static_cast<size_t>(len)) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += j;
    }
  }
  return out;
}
}  // namespace ds
