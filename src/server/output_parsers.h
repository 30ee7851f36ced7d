// Streaming output parsers of the OpenAI layer, fed with detokenized text deltas.
//
// ReasoningParser ("--reasoning-parser deepseek-r1"): text inside <think>...</think> goes to
// `reasoning_content`, the rest to `content`. If the prompt already opened <think> (the R1
// chat template ends with "<think>\n"), output starts in reasoning until </think>. Otherwise a
// leading <think> (after whitespace) opens reasoning; output with no think tags is content.
// Partial tags at the end of a delta are held back until decided.
//
// ToolCallParser ("--tool-call-parser deepseek_v3"): DeepSeek-V3 markup
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//   ... <｜tool▁calls▁end｜>
// becomes OpenAI tool calls {id, type "function", function {name, arguments}}; text before
// the markup is content. Each call is emitted whole once its end marker has arrived.
#pragma once

#include <string>
#include <vector>

namespace ds {

class ReasoningParser {
 public:
  explicit ReasoningParser(bool prompt_opened_think);
  struct Delta {
    std::string reasoning;
    std::string content;
  };
  Delta Feed(const std::string& text);
  Delta Flush();
  // True when the prompt text ends inside an open <think> block.
  static bool PromptOpensThink(const std::string& prompt_text);

 private:
  enum class State { kUndecided, kReasoning, kContent };
  void Run(Delta* d, bool final);
  State state_;
  std::string buf_;
};

struct ToolCall {
  std::string id;
  std::string type = "function";
  std::string name;
  std::string arguments;
};

class ToolCallParser {
 public:
  struct Delta {
    std::string content;
    std::vector<ToolCall> calls;
  };
  Delta Feed(const std::string& text);
  Delta Flush();
  int num_calls() const { return num_calls_; }

 private:
  enum class State { kText, kCalls, kAfter };
  void Run(Delta* d, bool final);
  State state_ = State::kText;
  std::string buf_;
  int num_calls_ = 0;
};

// Longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagSuffix(const std::string& s, const std::string& tag);

}  // namespace ds
