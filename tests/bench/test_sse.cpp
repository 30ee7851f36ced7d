#include <gtest/gtest.h>

#include "bench/client.h"
#include "bench/sse.h"

namespace ds::bench {
namespace {

std::vector<std::string> FeedAll(const std::string& stream, size_t piece) {
  SseParser p;
  std::vector<std::string> ev;
  for (size_t i = 0; i < stream.size(); i += piece) p.Feed(std::string_view(stream).substr(i, piece), &ev);
  p.Finish(&ev);
  return ev;
}

TEST(BenchSse, SplitsEventsAtAnyByteBoundary) {
  const std::string s =
      ": keep-alive comment\r\n\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: message\nid: 7\ndata:{\"b\":2}\n\n"
      "data: line1\ndata: line2\n\n"
      "data: {\"c\":3}\r\r"
      "data: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":2}", "line1\nline2", "{\"c\":3}", "[DONE]"};
  for (size_t piece : {1, 2, 3, 5, 7, 64, 4096}) EXPECT_EQ(FeedAll(s, piece), want) << "piece " << piece;
}

TEST(BenchSse, FinishFlushesUnterminatedEvent) {
  EXPECT_EQ(FeedAll("data: {\"x\":1}", 4), std::vector<std::string>{"{\"x\":1}"});
  EXPECT_EQ(FeedAll("data: {\"x\":1}\n", 4), std::vector<std::string>{"{\"x\":1}"});
  EXPECT_TRUE(FeedAll("\n\n: only a comment\n\n", 3).empty());
}

TEST(BenchSse, ParsesCompletionChatUsageDoneAndErrors) {
  auto c = ParseStreamChunk(R"({"id":"x","choices":[{"index":0,"text":" hello","finish_reason":null}]})");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->has_content);
  EXPECT_EQ(c->text, " hello");

  auto role = ParseStreamChunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})");
  ASSERT_TRUE(role.ok());
  EXPECT_FALSE(role->has_content);  // chat preamble is not a token

  auto chat = ParseStreamChunk(R"({"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]})");
  ASSERT_TRUE(chat.ok());
  EXPECT_TRUE(chat->has_content);
  EXPECT_EQ(chat->text, "Hi");

  auto empty_tok = ParseStreamChunk(R"({"choices":[{"text":"","finish_reason":null}]})");
  ASSERT_TRUE(empty_tok.ok());
  EXPECT_TRUE(empty_tok->has_content);  // a token that decoded to no text yet

  auto fin = ParseStreamChunk(R"({"choices":[{"text":"","finish_reason":"length"}]})");
  ASSERT_TRUE(fin.ok());
  EXPECT_FALSE(fin->has_content);
  EXPECT_EQ(fin->finish_reason, "length");

  auto usage = ParseStreamChunk(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"prompt_tokens_details":{"cached_tokens":8}}})");
  ASSERT_TRUE(usage.ok());
  EXPECT_FALSE(usage->has_content);
  EXPECT_EQ(usage->prompt_tokens.value(), 12);
  EXPECT_EQ(usage->completion_tokens.value(), 34);
  EXPECT_EQ(usage->cached_tokens.value(), 8);

  auto done = ParseStreamChunk(" [DONE] ");
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->done);

  auto err = ParseStreamChunk(R"({"error":{"message":"out of memory","code":500}})");
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->error, "out of memory");

  EXPECT_FALSE(ParseStreamChunk("{not json").ok());
  EXPECT_FALSE(ParseStreamChunk("[1,2]").ok());
}

TEST(BenchStreamAccumulator, TimesTokensAndPrefersUsage) {
  StreamAccumulator acc;
  EXPECT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", 0.05));
  EXPECT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"content":"a"}}]})", 0.10));
  EXPECT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"content":"b"}}]})", 0.15));
  EXPECT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"content":"c"}}]})", 0.35));
  EXPECT_TRUE(acc.OnEvent(R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}})", 0.36));
  EXPECT_FALSE(acc.OnEvent("[DONE]", 0.36));
  RequestOutcome r;
  acc.Finish(0.40, /*fallback_prompt_tokens=*/100, &r);
  EXPECT_TRUE(r.success);
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.10);
  ASSERT_EQ(r.itl_s.size(), 2u);
  EXPECT_NEAR(r.itl_s[0], 0.05, 1e-12);
  EXPECT_NEAR(r.itl_s[1], 0.20, 1e-12);
  EXPECT_EQ(r.output_tokens, 4);  // from usage, not the 3 chunks
  EXPECT_EQ(r.prompt_tokens, 9);
  EXPECT_DOUBLE_EQ(r.e2e_s, 0.40);
}

TEST(BenchStreamAccumulator, FallbacksAndFailures) {
  StreamAccumulator a;
  a.OnEvent(R"({"choices":[{"text":"x"}]})", 1);
  a.OnEvent(R"({"choices":[{"text":"y"}]})", 2);
  RequestOutcome r;
  a.Finish(2, 77, &r);
  EXPECT_TRUE(r.success);
  EXPECT_EQ(r.output_tokens, 2);  // counted chunks
  EXPECT_EQ(r.prompt_tokens, 77);
  EXPECT_FALSE(r.usage_reported);

  StreamAccumulator none;
  none.OnEvent("[DONE]", 1);
  RequestOutcome r2;
  none.Finish(1, 1, &r2);
  EXPECT_FALSE(r2.success);

  StreamAccumulator err;
  err.OnEvent(R"({"choices":[{"text":"x"}]})", 1);
  EXPECT_FALSE(err.OnEvent(R"({"error":"engine died"})", 2));
  RequestOutcome r3;
  err.Finish(2, 1, &r3);
  EXPECT_FALSE(r3.success);
  EXPECT_NE(r3.error.find("engine died"), std::string::npos);

  StreamAccumulator garbage;
  EXPECT_FALSE(garbage.OnEvent("<html>", 1));
  RequestOutcome r4;
  garbage.Finish(1, 1, &r4);
  EXPECT_FALSE(r4.success);
}

TEST(BenchBaseUrl, Parses) {
  auto a = ParseBaseUrl("http://10.0.0.2:30000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.2");
  EXPECT_EQ(a->port, "30000");
  EXPECT_EQ(a->path_prefix, "");
  auto b = ParseBaseUrl("localhost:8000/api/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "localhost");
  EXPECT_EQ(b->path_prefix, "/api");
  auto c = ParseBaseUrl("http://[::1]:9000");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, "9000");
  EXPECT_EQ(ParseBaseUrl("http://h").value().port, "80");
  EXPECT_FALSE(ParseBaseUrl("https://h:1").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:x1").ok());
  EXPECT_FALSE(ParseBaseUrl("http://").ok());
}

}  // namespace
}  // namespace ds::bench

namespace ds::bench {
namespace {
TEST(BenchStreamAccumulator, TokensWithoutTextStillSucceed) {
  // The server generated 5 tokens that all decode to no text (e.g. skipped special tokens)
  // and streamed only the finish marker and usage.
  StreamAccumulator acc;
  EXPECT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", 0.01));
  EXPECT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{},"finish_reason":"length"}]})", 0.30));
  EXPECT_TRUE(acc.OnEvent(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}})", 0.31));
  EXPECT_FALSE(acc.OnEvent("[DONE]", 0.31));
  RequestOutcome r;
  acc.Finish(0.32, 3, &r);
  EXPECT_TRUE(r.success);
  EXPECT_FALSE(r.tokens_streamed);
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.30);
  EXPECT_EQ(r.output_tokens, 5);
  BenchMetrics m = ComputeMetrics({r}, 1.0, 1, SloConfig{0, 1});
  EXPECT_EQ(m.tpot_ms.count, 0u);  // no per-token timing, no TPOT sample
  EXPECT_EQ(m.total_output_tokens, 5);
}
}  // namespace
}  // namespace ds::bench

namespace ds::bench {
namespace {
TEST(BenchStreamAccumulator, TokenIdsMakeEmptyTextChunksTokenEvents) {
  // return_token_ids: a token with no text yet still arrives as a chunk with its id.
  auto c = ParseStreamChunk(R"({"choices":[{"text":"","token_ids":[301],"finish_reason":null}]})");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->has_content);
  EXPECT_EQ(c->num_token_ids, 1);
  auto fin = ParseStreamChunk(R"({"choices":[{"text":"","token_ids":[],"finish_reason":"length"}]})");
  ASSERT_TRUE(fin.ok());
  EXPECT_FALSE(fin->has_content);
  auto empty_ids = ParseStreamChunk(R"({"choices":[{"text":"","token_ids":[],"finish_reason":null}]})");
  ASSERT_TRUE(empty_ids.ok());
  EXPECT_FALSE(empty_ids->has_content);  // the server says: no token in this chunk

  StreamAccumulator acc;
  acc.OnEvent(R"({"choices":[{"text":"","token_ids":[301]}]})", 0.10);
  acc.OnEvent(R"({"choices":[{"text":"ab","token_ids":[302,303]}]})", 0.12);
  acc.OnEvent(R"({"choices":[{"text":"","token_ids":[],"finish_reason":"length"}]})", 0.13);
  acc.OnEvent("[DONE]", 0.13);
  RequestOutcome r;
  acc.Finish(0.13, 5, &r);
  EXPECT_TRUE(r.success);
  EXPECT_TRUE(r.tokens_streamed);
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.10);  // the first token, though it had no text
  EXPECT_EQ(r.output_tokens, 3);     // no usage: the streamed ids
}
}  // namespace
}  // namespace ds::bench
