#include "server/output_parsers.h"

#include <atomic>
#include <cstdio>
#include <random>

namespace ds {

namespace {
const std::string kThinkOpen = "<think>";
const std::string kThinkClose = "</think>";
const std::string kCallsBegin = "<｜tool▁calls▁begin｜>";
const std::string kCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kCallBegin = "<｜tool▁call▁begin｜>";
const std::string kCallEnd = "<｜tool▁call▁end｜>";
const std::string kSep = "<｜tool▁sep｜>";

size_t LeadingWs(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}
std::string Trim(const std::string& s) {
  size_t a = LeadingWs(s), b = s.size();
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\n' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return s.substr(a, b - a);
}
}  // namespace

size_t PartialTagSuffix(const std::string& s, const std::string& tag) {
  size_t max_k = std::min(s.size(), tag.size() - 1);
  for (size_t k = max_k; k > 0; --k)
    if (s.compare(s.size() - k, k, tag, 0, k) == 0) return k;
  return 0;
}

ReasoningParser::ReasoningParser(bool prompt_opened_think)
    : state_(prompt_opened_think ? State::kReasoning : State::kUndecided) {}

bool ReasoningParser::PromptOpensThink(const std::string& p) {
  size_t o = p.rfind(kThinkOpen);
  if (o == std::string::npos) return false;
  size_t c = p.rfind(kThinkClose);
  return c == std::string::npos || c < o;
}

void ReasoningParser::Run(Delta* d, bool final) {
  while (!buf_.empty()) {
    if (state_ == State::kUndecided) {
      size_t ws = LeadingWs(buf_);
      std::string rest = buf_.substr(ws);
      if (rest.compare(0, kThinkOpen.size(), kThinkOpen) == 0) {
        buf_ = rest.substr(kThinkOpen.size());
        state_ = State::kReasoning;
        continue;
      }
      if (!final && (rest.empty() || kThinkOpen.compare(0, rest.size(), rest) == 0)) return;
      state_ = State::kContent;
      continue;
    }
    if (state_ == State::kReasoning) {
      size_t p = buf_.find(kThinkClose);
      if (p != std::string::npos) {
        d->reasoning += buf_.substr(0, p);
        buf_ = buf_.substr(p + kThinkClose.size());
        state_ = State::kContent;
        continue;
      }
      size_t hold = final ? 0 : PartialTagSuffix(buf_, kThinkClose);
      d->reasoning += buf_.substr(0, buf_.size() - hold);
      buf_ = buf_.substr(buf_.size() - hold);
      return;
    }
    d->content += buf_;
    buf_.clear();
  }
}

ReasoningParser::Delta ReasoningParser::Feed(const std::string& text) {
  Delta d;
  buf_ += text;
  Run(&d, false);
  return d;
}

ReasoningParser::Delta ReasoningParser::Flush() {
  Delta d;
  Run(&d, true);
  return d;
}

namespace {
std::string NewCallId() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char buf[40];
  std::snprintf(buf, sizeof(buf), "call_%016llx",
                static_cast<unsigned long long>((salt * 0x9E3779B97F4A7C15ull) ^ (counter.fetch_add(1) * 0xBF58476D1CE4E5B9ull)));
  return buf;
}

bool ParseOneCall(const std::string& seg, ToolCall* call) {
  // seg: [ws] <｜tool▁call▁begin｜> TYPE <｜tool▁sep｜> NAME \n ```json \n ARGS \n ```
  size_t b = seg.find(kCallBegin);
  if (b == std::string::npos) return false;
  size_t s = seg.find(kSep, b);
  if (s == std::string::npos) return false;
  call->type = Trim(seg.substr(b + kCallBegin.size(), s - b - kCallBegin.size()));
  if (call->type.empty()) call->type = "function";
  std::string rest = seg.substr(s + kSep.size());
  size_t nl = rest.find('\n');
  call->name = Trim(rest.substr(0, nl));
  std::string args = nl == std::string::npos ? "" : rest.substr(nl + 1);
  size_t f = args.find("```");
  if (f != std::string::npos) {
    size_t line = args.find('\n', f);
    args = line == std::string::npos ? "" : args.substr(line + 1);
    size_t close = args.rfind("```");
    if (close != std::string::npos) args = args.substr(0, close);
  }
  call->arguments = Trim(args);
  if (call->name.empty()) return false;
  call->id = NewCallId();
  return true;
}
}  // namespace

void ToolCallParser::Run(Delta* d, bool final) {
  while (!buf_.empty()) {
    if (state_ == State::kText) {
      size_t p = buf_.find(kCallsBegin);
      if (p != std::string::npos) {
        d->content += buf_.substr(0, p);
        buf_ = buf_.substr(p + kCallsBegin.size());
        state_ = State::kCalls;
        continue;
      }
      size_t hold = final ? 0 : PartialTagSuffix(buf_, kCallsBegin);
      d->content += buf_.substr(0, buf_.size() - hold);
      buf_ = buf_.substr(buf_.size() - hold);
      return;
    }
    if (state_ == State::kCalls) {
      size_t ws = LeadingWs(buf_);
      if (buf_.compare(ws, kCallsEnd.size(), kCallsEnd) == 0) {
        buf_ = buf_.substr(ws + kCallsEnd.size());
        state_ = State::kAfter;
        continue;
      }
      size_t e = buf_.find(kCallEnd);
      if (e == std::string::npos) {
        if (final) {  // truncated call: give the raw text back as content
          d->content += buf_;
          buf_.clear();
        }
        return;
      }
      ToolCall call;
      if (ParseOneCall(buf_.substr(0, e), &call)) {
        d->calls.push_back(std::move(call));
        ++num_calls_;
      } else {
        d->content += buf_.substr(0, e + kCallEnd.size());
      }
      buf_ = buf_.substr(e + kCallEnd.size());
      continue;
    }
    // After the calls block: further text is content.
    d->content += buf_;
    buf_.clear();
  }
}

ToolCallParser::Delta ToolCallParser::Feed(const std::string& text) {
  Delta d;
  buf_ += text;
  Run(&d, false);
  return d;
}

ToolCallParser::Delta ToolCallParser::Flush() {
  Delta d;
  Run(&d, true);
  return d;
}

}  // namespace ds
