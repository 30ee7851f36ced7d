// R1-style reasoning split: the text between <think> and </think> is reasoning_content, the
// rest is content (what the OpenAI-compatible server returns as message.reasoning_content and
// message.content, as vLLM's deepseek_r1 reasoning parser does).
//
// Rules (the same for whole texts and for streams, SplitReasoning runs the stream parser):
//   - prompt_opened_think (the prompt already ends inside "<think>", as R1 templates with the
//     "<think>\n" generation prompt do): the output starts as reasoning;
//   - otherwise the output is reasoning only if it starts with "<think>" (stripped), and
//     plain content if it does not (no think tags: everything is content);
//   - reasoning ends at the first "</think>" (stripped); everything after it is content, a
//     later "<think>"/"</think>" included. A stream that never closes the tag is all reasoning.
// Tags split across deltas are held back until they can be recognised, so the concatenated
// stream deltas equal the whole-text split.
#pragma once

#include <string>
#include <string_view>

namespace ds {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningStreamParser {
 public:
  explicit ReasoningStreamParser(bool prompt_opened_think = false,
                                 std::string start_tag = "<think>",
                                 std::string end_tag = "</think>");
  // Feeds a text delta; returns what can be emitted now.
  ReasoningDelta Push(std::string_view delta);
  // End of stream: flushes held-back text.
  ReasoningDelta Finish();
  // True once the end tag has been seen (the model is answering).
  bool reasoning_ended() const { return state_ == State::kContent && saw_reasoning_; }
  bool in_reasoning() const { return state_ == State::kReasoning; }
  // True if a reasoning section was opened (by the prompt or a leading start tag).
  bool saw_reasoning() const { return saw_reasoning_; }

 private:
  enum class State { kStart, kReasoning, kContent };
  State state_;
  bool saw_reasoning_ = false;
  std::string start_tag_, end_tag_;
  std::string held_;
};

struct ReasoningSplit {
  std::string reasoning_content;
  std::string content;
  bool has_reasoning = false;  // a reasoning section was present (possibly empty)
};

ReasoningSplit SplitReasoning(std::string_view text, bool prompt_opened_think = false);

// True if the rendered prompt leaves a <think> section open (its last "<think>" comes after its
// last "</think>"), e.g. an R1 template's generation prompt "<｜Assistant｜><think>\n": the
// value to pass as prompt_opened_think.
bool PromptOpensThink(std::string_view prompt);

}  // namespace ds
