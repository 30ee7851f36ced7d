#include <gtest/gtest.h>

#include "server/output_parsers.h"
#include "server/text_tokenizer.h"

namespace ds {
namespace {

// Feeds `text` split at every pair of cut points and checks the concatenated result is the
// same as feeding it whole: streaming must not depend on how text arrives.
template <typename P, typename F>
void ForEverySplit(const std::string& text, F make, std::function<void(const std::string&, const std::string&, size_t)> check) {
  for (size_t i = 0; i <= text.size(); ++i) {
    P p = make();
    std::string a, b;
    auto d1 = p.Feed(text.substr(0, i));
    auto d2 = p.Feed(text.substr(i));
    auto d3 = p.Flush();
    if constexpr (std::is_same_v<P, ReasoningParser>) {
      a = d1.reasoning + d2.reasoning + d3.reasoning;
      b = d1.content + d2.content + d3.content;
      check(a, b, i);
    }
  }
}

TEST(ReasoningParser, ThinkTagsSplitAnywhere) {
  const std::string t = "<think>I reason.</think>The answer.";
  ForEverySplit<ReasoningParser>(t, [] { return ReasoningParser(false); },
      [](const std::string& r, const std::string& c, size_t i) {
        EXPECT_EQ(r, "I reason.") << "split " << i;
        EXPECT_EQ(c, "The answer.") << "split " << i;
      });
}

TEST(ReasoningParser, PromptAlreadyOpenedThink) {
  EXPECT_TRUE(ReasoningParser::PromptOpensThink("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(ReasoningParser::PromptOpensThink("<think>x</think><｜Assistant｜>"));
  const std::string t = "step 1</think>\n\nresult";
  ForEverySplit<ReasoningParser>(t, [] { return ReasoningParser(true); },
      [](const std::string& r, const std::string& c, size_t i) {
        EXPECT_EQ(r, "step 1") << i;
        EXPECT_EQ(c, "\n\nresult") << i;
      });
  // Opened in the prompt and never closed: all reasoning.
  ReasoningParser p(true);
  auto d = p.Feed("still thinking <");
  auto f = p.Flush();
  EXPECT_EQ(d.reasoning + f.reasoning, "still thinking <");
  EXPECT_EQ(d.content + f.content, "");
}

TEST(ReasoningParser, NoThinkTagsIsContent) {
  ForEverySplit<ReasoningParser>("Just an answer <b>", [] { return ReasoningParser(false); },
      [](const std::string& r, const std::string& c, size_t i) {
        EXPECT_EQ(r, "") << i;
        EXPECT_EQ(c, "Just an answer <b>") << i;
      });
}

TEST(ToolCallParser, DeepSeekV3MarkupSplitAnywhere) {
  const std::string t =
      "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
      "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  for (size_t i = 0; i <= t.size(); ++i) {
    ToolCallParser p;
    auto d1 = p.Feed(t.substr(0, i));
    auto d2 = p.Feed(t.substr(i));
    auto d3 = p.Flush();
    std::vector<ToolCall> calls;
    for (auto* d : {&d1, &d2, &d3}) calls.insert(calls.end(), d->calls.begin(), d->calls.end());
    ASSERT_EQ(calls.size(), 2u) << i;
    EXPECT_EQ(d1.content + d2.content + d3.content, "Let me check.") << i;
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(calls[1].name, "get_time");
    EXPECT_EQ(calls[1].arguments, "{}");
    EXPECT_NE(calls[0].id, calls[1].id);
  }
}

TEST(ToolCallParser, TruncatedCallBecomesContent) {
  ToolCallParser p;
  auto d = p.Feed("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\"");
  EXPECT_TRUE(d.calls.empty());
  auto f = p.Flush();
  EXPECT_TRUE(f.calls.empty());
  EXPECT_NE(f.content.find("{\"a\""), std::string::npos);
}

TEST(ChatTemplate, DeepSeekV3Layout) {
  nlohmann::json msgs = nlohmann::json::parse(R"([
    {"role":"system","content":"S"},{"role":"user","content":"Q"},
    {"role":"assistant","content":"A"},{"role":"user","content":"Q2"}])");
  auto r = RenderDeepSeekV3Chat(msgs, nullptr, {}, "<B>", "<E>");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<B>S<｜User｜>Q<｜Assistant｜>A<E><｜User｜>Q2<｜Assistant｜>");
  ChatTemplateOptions cont;
  cont.continue_final_message = true;
  cont.add_generation_prompt = false;
  nlohmann::json m2 = nlohmann::json::parse(R"([{"role":"user","content":"Q"},{"role":"assistant","content":"<think>\n"}])");
  EXPECT_EQ(*RenderDeepSeekV3Chat(m2, nullptr, cont, "<B>", "<E>"), "<B><｜User｜>Q<｜Assistant｜><think>\n");
  EXPECT_FALSE(RenderDeepSeekV3Chat(nlohmann::json::array(), nullptr, {}, "", "").ok());
  EXPECT_FALSE(RenderDeepSeekV3Chat(nlohmann::json::parse(R"([{"role":"wizard","content":"x"}])"), nullptr, {}, "", "").ok());
}

}  // namespace
}  // namespace ds
