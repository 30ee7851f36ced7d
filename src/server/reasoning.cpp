// R1-style reasoning split (see reasoning.h).
#include "server/reasoning.h"

#include <algorithm>

namespace ds {

namespace {
// Length of the longest suffix of s that is a proper prefix of tag.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  size_t max = std::min(s.size(), tag.size() - 1);
  for (size_t k = max; k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}
}  // namespace

ReasoningStreamParser::ReasoningStreamParser(bool prompt_opened_think, std::string start_tag,
                                             std::string end_tag)
    : state_(prompt_opened_think ? State::kReasoning : State::kStart),
      saw_reasoning_(prompt_opened_think),
      start_tag_(std::move(start_tag)),
      end_tag_(std::move(end_tag)) {}

ReasoningDelta ReasoningStreamParser::Push(std::string_view delta) {
  ReasoningDelta out;
  held_.append(delta);
  if (state_ == State::kStart) {
    if (held_.size() < start_tag_.size() &&
        std::string_view(start_tag_).substr(0, held_.size()) == held_)
      return out;  // may still become the start tag
    if (held_.compare(0, start_tag_.size(), start_tag_) == 0) {
      held_.erase(0, start_tag_.size());
      state_ = State::kReasoning;
      saw_reasoning_ = true;
    } else {
      state_ = State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    size_t pos = held_.find(end_tag_);
    if (pos != std::string::npos) {
      out.reasoning = held_.substr(0, pos);
      held_.erase(0, pos + end_tag_.size());
      state_ = State::kContent;
    } else {
      size_t keep = PartialTagSuffix(held_, end_tag_);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
  }
  // kContent
  out.content += held_;
  held_.clear();
  return out;
}

ReasoningDelta ReasoningStreamParser::Finish() {
  ReasoningDelta out;
  if (state_ == State::kReasoning) out.reasoning = held_;
  else out.content = held_;
  held_.clear();
  if (state_ == State::kStart) state_ = State::kContent;
  return out;
}

ReasoningSplit SplitReasoning(std::string_view text, bool prompt_opened_think) {
  ReasoningStreamParser p(prompt_opened_think);
  ReasoningSplit r;
  for (const auto& d : {p.Push(text), p.Finish()}) {
    r.reasoning_content += d.reasoning;
    r.content += d.content;
  }
  r.has_reasoning = p.saw_reasoning();
  return r;
}

bool PromptOpensThink(std::string_view prompt) {
  size_t open = prompt.rfind("<think>");
  if (open == std::string_view::npos) return false;
  size_t close = prompt.rfind("</think>");
  return close == std::string_view::npos || close < open;
}

}  // namespace ds
