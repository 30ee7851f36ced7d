// Tokenizer tests against goldens from Hugging Face tokenizers/transformers
// (scripts/make_tokenizer_goldens.py; files under tests/data/tokenizer/).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_template.h"
#include "scheduler/detokenizer.h"
#include "server/output_parsers.h"
#include "server/tokenizer.h"

namespace ds {
namespace {

using json = nlohmann::json;

const std::string kModelDir = std::string(DS_SHARED_DIR) + "/models/deepseek-v3";
const std::string kData = std::string(DS_TEST_DATA_DIR) + "/tokenizer";

const Tokenizer& Tok() {
  static std::unique_ptr<Tokenizer> t = [] {
    auto r = Tokenizer::Load(kModelDir);
    if (!r.ok()) throw std::runtime_error(r.status().ToString());
    return std::move(r).value();
  }();
  return *t;
}

std::vector<json> ReadJsonl(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::vector<json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip = false) {
  DeltaDetokenizer d(&tok, skip);
  std::string s;
  for (int32_t id : ids) {
    std::string delta = d.Add(id);
    EXPECT_TRUE(IsValidUtf8(delta));
    s += delta;
  }
  return s + d.Flush();
}

TEST(Tokenizer, CorpusMatchesHuggingFace) {
  const auto& tok = Tok();
  auto rows = ReadJsonl(kData + "/corpus.jsonl");
  ASSERT_GE(rows.size(), 400u);
  size_t match = 0, match_ns = 0;
  for (const auto& r : rows) {
    std::string text = r["text"];
    auto want = r["ids"].get<std::vector<int32_t>>();
    auto got = tok.Encode(text);
    EXPECT_EQ(got, want) << "text: " << json(text).dump();
    match += got == want;
    auto got_ns = tok.Encode(text, false, /*parse_special=*/false);
    EXPECT_EQ(got_ns, r["ids_no_special"].get<std::vector<int32_t>>()) << json(text).dump();
    match_ns += got_ns == r["ids_no_special"].get<std::vector<int32_t>>();
    // Round trip and streaming.
    std::string dec = tok.Decode(want);
    EXPECT_EQ(dec, text);
    std::string st = Stream(tok, want);
    EXPECT_EQ(st, dec);
    if (IsValidUtf8(text)) {
      EXPECT_EQ(st.find("\xEF\xBF\xBD"), text.find("\xEF\xBF\xBD"));
    }
    // BOS per add_bos_token.
    auto with_bos = tok.Encode(text, /*add_special_tokens=*/true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], 0);
    EXPECT_EQ(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()), want);
  }
  std::printf("corpus: %zu/%zu strings match (special parsed), %zu/%zu (special not parsed)\n", match,
              rows.size(), match_ns, rows.size());
}

TEST(Tokenizer, DecodeMatchesHuggingFace) {
  const auto& tok = Tok();
  auto rows = ReadJsonl(kData + "/decode.jsonl");
  ASSERT_GE(rows.size(), 300u);
  for (const auto& r : rows) {
    auto ids = r["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.Decode(ids, false), r["text"].get<std::string>()) << r["ids"].dump();
    EXPECT_EQ(tok.Decode(ids, true), r["text_skip_special"].get<std::string>()) << r["ids"].dump();
    EXPECT_EQ(Stream(tok, ids, false), r["text"].get<std::string>()) << r["ids"].dump();
    EXPECT_EQ(Stream(tok, ids, true), r["text_skip_special"].get<std::string>()) << r["ids"].dump();
  }
}

std::string Fnv1a64Ids(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t id : ids) {
    std::string s = std::to_string(id) + ",";
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s.push_back(static_cast<char>(cp));
  else if (cp < 0x800) { s.push_back(static_cast<char>(0xC0 | (cp >> 6))); s.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
  else if (cp < 0x10000) { s.push_back(static_cast<char>(0xE0 | (cp >> 12))); s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F))); s.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
  else { s.push_back(static_cast<char>(0xF0 | (cp >> 18))); s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F))); s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F))); s.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
  return s;
}

// Every Unicode code point in several contexts: catches any difference between PCRE2's and
// Oniguruma's character classes (and Unicode versions).
TEST(Tokenizer, UnicodeSweepMatchesHuggingFace) {
  const auto& tok = Tok();
  json j = json::parse(ReadAll(kData + "/unicode_sweep.json"));
  size_t match = 0, total = 0;
  for (const auto& b : j["blocks"]) {
    uint32_t start = b["start"], end = b["end"];
    std::string text;
    for (uint32_t cp = start; cp < end; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string c = Utf8(cp);
      text += "a" + c + "b " + c + " 1" + c + "2." + c + "\n" + c + c;
    }
    auto ids = tok.Encode(text);
    bool ok = Fnv1a64Ids(ids) == b["fnv1a64"].get<std::string>() && ids.size() == b["num_ids"].get<size_t>();
    EXPECT_TRUE(ok) << "block U+" << std::hex << start << " differs from HF tokenizers";
    match += ok;
    ++total;
    EXPECT_EQ(tok.Decode(ids), text);
  }
  std::printf("unicode sweep: %zu/%zu blocks of 4096 code points match\n", match, total);
}

TEST(Tokenizer, VariantsMatchHuggingFace) {
  std::string base_text = ReadAll(kModelDir + "/tokenizer.json");
  json base = json::parse(base_text);
  std::string cfg = ReadAll(kModelDir + "/tokenizer_config.json");
  auto rows = ReadJsonl(kData + "/variants.jsonl");
  ASSERT_GE(rows.size(), 10u);
  for (const auto& v : rows) {
    json tj = base;
    const json& patch = v["patch"];
    if (patch.contains("pre_tokenizer")) tj["pre_tokenizer"] = patch["pre_tokenizer"];
    if (patch.contains("added_tokens_flags"))
      for (auto& a : tj["added_tokens"])
        if (patch["added_tokens_flags"].contains(a["content"].get<std::string>()))
          a.update(patch["added_tokens_flags"][a["content"].get<std::string>()]);
    if (patch.contains("added_tokens_extra"))
      for (const auto& a : patch["added_tokens_extra"]) tj["added_tokens"].push_back(a);
    auto t = Tokenizer::FromJson(tj.dump(), cfg);
    ASSERT_TRUE(t.ok()) << v["name"] << ": " << t.status().ToString();
    size_t match = 0;
    for (const auto& c : v["cases"]) {
      auto got = (*t)->Encode(c["text"].get<std::string>());
      EXPECT_EQ(got, c["ids"].get<std::vector<int32_t>>()) << v["name"] << " text " << c["text"].dump();
      match += got == c["ids"].get<std::vector<int32_t>>();
    }
    std::printf("variant %s: %zu/%zu match\n", v["name"].get<std::string>().c_str(), match, v["cases"].size());
  }
}

// The GPT-2 byte-level character of a byte (bytes_to_unicode), as UTF-8.
std::string ByteToken(unsigned char b) {
  int n = 0;
  for (int x = 0; x < 256; ++x) {
    bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    uint32_t cp = printable ? x : 256 + n++;
    if (x == b) return Utf8(cp);
  }
  return "";
}

// The hand-written ASCII matchers for the DeepSeek pre-tokenizer patterns against the PCRE2
// path: the same tokenizer.json with each pattern wrapped in a no-op group "(?:...)" (which
// disables the fast paths), on every ASCII string of up to 5 characters over an alphabet with
// one character of each class, and on random longer ones.
TEST(Tokenizer, AsciiFastPathsEqualRegex) {
  const auto& tok = Tok();
  json tj = json::parse(ReadAll(kModelDir + "/tokenizer.json"));
  for (auto& step : tj["pre_tokenizer"]["pretokenizers"])
    if (step["type"] == "Split")
      step["pattern"]["Regex"] = "(?:" + step["pattern"]["Regex"].get<std::string>() + ")";
  auto slow = Tokenizer::FromJson(tj.dump(), ReadAll(kModelDir + "/tokenizer_config.json"));
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  const std::string alphabet = std::string("aZ1 \t\n\r!_\x0b\x01-", 12);
  size_t checked = 0;
  std::vector<size_t> digits;
  for (size_t len = 1; len <= 5; ++len) {
    digits.assign(len, 0);
    while (true) {
      std::string str;
      for (size_t d : digits) str.push_back(alphabet[d]);
      ASSERT_EQ(tok.Encode(str), (*slow)->Encode(str)) << json(str).dump();
      ++checked;
      size_t k = 0;
      while (k < len && ++digits[k] == alphabet.size()) digits[k++] = 0;
      if (k == len) break;
    }
  }
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string str;
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    int len = static_cast<int>((x >> 33) % 40);
    for (int k = 0; k < len; ++k) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      str.push_back(static_cast<char>((x >> 35) % 128));
    }
    ASSERT_EQ(tok.Encode(str), (*slow)->Encode(str)) << json(str).dump();
    ++checked;
  }
  std::printf("ascii fast paths: %zu strings equal to the regex path\n", checked);
}

TEST(Tokenizer, StreamingWithPromptEndingMidCharacter) {
  const auto& tok = Tok();
  for (std::string text : {"你好世界😀👨‍👩‍👧‍👦 done", "e\xCC\x81 สวัสดี 🇺🇸🇨🇳", "Hello 🙂 world"}) {
    auto ids = tok.Encode(text);
    // Byte-level tokens that split characters: prompt/generation cut at every position.
    for (size_t cut = 0; cut <= ids.size(); ++cut) {
      std::vector<int32_t> prompt(ids.begin(), ids.begin() + cut), gen(ids.begin() + cut, ids.end());
      DeltaDetokenizer d(&tok, false, prompt);
      std::string out = d.PromptText();
      for (int32_t id : gen) {
        std::string delta = d.Add(id);
        EXPECT_TRUE(IsValidUtf8(delta));
        out += delta;
      }
      out += d.Flush();
      EXPECT_EQ(out, text) << "cut " << cut;
    }
  }
  // Single byte tokens of one 4-byte character: nothing until the last byte.
  std::string four = "\xF0\x9F\x98\x80";
  DeltaDetokenizer d(&tok, false);
  std::string acc;
  for (int k = 0; k < 4; ++k) {
    auto id = tok.TokenToId(ByteToken(static_cast<unsigned char>(four[k])));
    ASSERT_TRUE(id.has_value()) << k;
    std::string delta = d.Add(*id);
    if (k < 3) {
      EXPECT_EQ(delta, "") << k;
    }
    acc += delta;
  }
  EXPECT_EQ(acc, four);
  // Invalid bytes end as U+FFFD, never abort.
  DeltaDetokenizer bad(&tok, false);
  std::string s = bad.Add(*tok.TokenToId(ByteToken(0xF0)));
  EXPECT_EQ(s, "");
  s += bad.Add(*tok.TokenToId("a"));
  s += bad.Flush();
  EXPECT_EQ(s, "\xEF\xBF\xBD" "a");
  DeltaDetokenizer trunc(&tok, false);
  s = trunc.Add(*tok.TokenToId(ByteToken(0xF0)));
  s += trunc.Flush();
  EXPECT_EQ(s, "\xEF\xBF\xBD");
}

TEST(Tokenizer, SpecialTokensAndApi) {
  const auto& tok = Tok();
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_TRUE(tok.add_bos_token());
  EXPECT_EQ(tok.vocab_size(), 128815);
  EXPECT_TRUE(tok.IsSpecial(1));
  EXPECT_FALSE(tok.IsSpecial(128803));  // <｜User｜> is added but not special
  EXPECT_EQ(tok.Encode("<｜User｜>"), std::vector<int32_t>{128803});
  // Not parsing special tokens leaves non-special added tokens recognised (HF semantics).
  EXPECT_EQ(tok.Encode("<｜User｜>", false, false), std::vector<int32_t>{128803});
  EXPECT_NE(tok.Encode("<｜end▁of▁sentence｜>", false, false), std::vector<int32_t>{1});
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{1, 19923}, true), "Hello");
  EXPECT_EQ(tok.IdToToken(19923), "Hello");
  // Invalid UTF-8 input is encoded as its U+FFFD replacement.
  EXPECT_EQ(tok.Encode("a\xFF" "b"), tok.Encode("a\xEF\xBF\xBD" "b"));
}

TEST(Tokenizer, RandomBytesNeverCrashAndRoundTrip) {
  const auto& tok = Tok();
  uint64_t x = 88172645463325252ULL;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const std::vector<std::string> pieces = {"<｜User｜>", "<｜end▁of▁sentence｜>", "<|EOT|>", "\r\n", " ", "1", "中", "😀", "\xCC\x81"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s;
    int n = static_cast<int>(next() % 40);
    for (int k = 0; k < n; ++k) {
      if (next() % 3 == 0) s += pieces[next() % pieces.size()];
      else s.push_back(static_cast<char>(next() & 0xFF));
    }
    auto ids = tok.Encode(s);
    std::string fixed = Utf8Lossy(s);
    ASSERT_EQ(tok.Decode(ids), fixed);
    ASSERT_EQ(Stream(tok, ids), fixed);
  }
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  const auto& tok = Tok();
  auto rows = ReadJsonl(kData + "/corpus.jsonl");
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t k = t; k < rows.size(); k += 2)
        if (tok.Encode(rows[k]["text"].get<std::string>()) != rows[k]["ids"].get<std::vector<int32_t>>()) ++mismatches;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Tokenizer, LoadErrors) {
  auto r = Tokenizer::Load("/nonexistent/dir");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  auto bad = Tokenizer::FromJson("{\"model\": ", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  auto uni = Tokenizer::FromJson(R"({"model": {"type": "Unigram", "vocab": []}})", "");
  ASSERT_FALSE(uni.ok());
  EXPECT_EQ(uni.status().code(), StatusCode::kUnimplemented);
  auto norm = Tokenizer::FromJson(
      R"({"normalizer": {"type": "NFKC"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})", "");
  ASSERT_FALSE(norm.ok());
  EXPECT_EQ(norm.status().code(), StatusCode::kUnimplemented);
}

// ------------------------------------------------------------------------------------------
// Chat template
// ------------------------------------------------------------------------------------------
TEST(ChatTemplate, MatchesTransformers) {
  const auto& tok = Tok();
  auto ct = ChatTemplate::FromTokenizer(tok);
  ASSERT_TRUE(ct.ok()) << ct.status().ToString();
  auto rows = ReadJsonl(kData + "/chat_template.jsonl");
  ASSERT_GE(rows.size(), 15u);
  size_t match = 0;
  for (const auto& r : rows) {
    auto text = (*ct)->Apply(r["messages"], r["add_generation_prompt"].get<bool>());
    ASSERT_TRUE(text.ok()) << r["name"] << ": " << text.status().ToString();
    EXPECT_EQ(*text, r["text"].get<std::string>()) << r["name"];
    auto ids = tok.Encode(*text);
    EXPECT_EQ(ids, r["ids"].get<std::vector<int32_t>>()) << r["name"];
    match += *text == r["text"].get<std::string>() && ids == r["ids"].get<std::vector<int32_t>>();
  }
  std::printf("chat template: %zu/%zu conversations match (text and ids)\n", match, rows.size());
}

TEST(ChatTemplate, DeepSeekV3ThroughJinjaMatchesTransformers) {
  const auto& tok = Tok();
  auto ct = ChatTemplate::FromString(tok.chat_template(), tok.bos_token(), tok.eos_token(), /*force_jinja=*/true);
  ASSERT_TRUE(ct.ok()) << ct.status().ToString();
  ASSERT_EQ((*ct)->kind(), ChatTemplate::Kind::kJinja);
  size_t match = 0;
  auto rows = ReadJsonl(kData + "/chat_template.jsonl");
  for (const auto& r : rows) {
    auto text = (*ct)->Apply(r["messages"], r["add_generation_prompt"].get<bool>());
    ASSERT_TRUE(text.ok()) << r["name"] << ": " << text.status().ToString();
    EXPECT_EQ(*text, r["text"].get<std::string>()) << r["name"];
    match += *text == r["text"].get<std::string>();
  }
  std::printf("chat template via jinja: %zu/%zu conversations match\n", match, rows.size());
}

TEST(ChatTemplate, JinjaTemplatesMatchTransformers) {
  std::ifstream f(kData + "/jinja_templates.jsonl");
  ASSERT_TRUE(f.good());
  std::string line;
  size_t templates = 0;
  while (std::getline(f, line)) {
    auto t = nlohmann::ordered_json::parse(line);
    auto ct = ChatTemplate::FromString(t["template"].get<std::string>(), "<｜begin▁of▁sentence｜>",
                                       "<｜end▁of▁sentence｜>");
    ASSERT_TRUE(ct.ok()) << t["name"] << ": " << ct.status().ToString();
    size_t match = 0;
    for (const auto& c : t["cases"]) {
      auto text = (*ct)->Apply(c["messages"], c["add_generation_prompt"].get<bool>(), c["tools"]);
      if (c["text"].is_null()) {
        EXPECT_FALSE(text.ok()) << t["name"] << " " << c["conversation"] << " should fail";
        match += !text.ok();
        continue;
      }
      ASSERT_TRUE(text.ok()) << t["name"] << " " << c["conversation"] << ": " << text.status().ToString();
      EXPECT_EQ(*text, c["text"].get<std::string>()) << t["name"] << " " << c["conversation"];
      match += *text == c["text"].get<std::string>();
    }
    std::printf("jinja template %s: %zu/%zu cases match\n", t["name"].get<std::string>().c_str(), match,
                t["cases"].size());
    ++templates;
  }
  EXPECT_GE(templates, 3u);
}

TEST(ChatTemplate, UnsupportedTemplateIsAClearError) {
  auto ct = ChatTemplate::FromString("{% include 'other.jinja' %}{{ messages }}", "<s>");
  ASSERT_FALSE(ct.ok());
  EXPECT_EQ(ct.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(ct.status().message().find("include"), std::string::npos) << ct.status().message();
  auto bad_filter = ChatTemplate::FromString("{{ messages | wordwrap(5) }}", "<s>");
  ASSERT_FALSE(bad_filter.ok());
  EXPECT_NE(bad_filter.status().message().find("wordwrap"), std::string::npos);
  auto syntax = ChatTemplate::FromString("{% if %}", "<s>");
  EXPECT_FALSE(syntax.ok());
  auto simple = ChatTemplate::FromString("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}", "<s>");
  ASSERT_TRUE(simple.ok());
  auto out = (*simple)->Apply(json::array({{{"role", "user"}, {"content", "hi"}}}), false);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "[user]hi");
  auto raise = ChatTemplate::FromString("{{ raise_exception('no system role') }}", "<s>");
  ASSERT_TRUE(raise.ok());
  auto r = (*raise)->Apply(json::array(), false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no system role"), std::string::npos);
  auto ok = ChatTemplate::FromString(ChatTemplate::DeepSeekV3Template(), "<s>");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->kind(), ChatTemplate::Kind::kDeepSeekV3);
  auto bad = (*ok)->Apply(json::object(), false);
  EXPECT_FALSE(bad.ok());
  auto bad2 = (*ok)->Apply(json::array({{{"role", "user"}, {"content", 3}}}), false);
  EXPECT_FALSE(bad2.ok());
}

// ------------------------------------------------------------------------------------------
// Reasoning split
// ------------------------------------------------------------------------------------------
struct WholeSplit {
  std::string reasoning_content, content;
  bool has_reasoning = false;
};
// The streaming ReasoningParser (server/output_parsers.h) over a whole text.
WholeSplit SplitReasoning(const std::string& text, bool prompt_opened_think = false) {
  ReasoningParser p(prompt_opened_think);
  WholeSplit w;
  for (const auto& d : {p.Feed(text), p.Flush()}) {
    w.reasoning_content += d.reasoning;
    w.content += d.content;
  }
  w.has_reasoning = prompt_opened_think || text.find("<think>") != std::string::npos;
  return w;
}

TEST(Reasoning, Split) {
  auto r = SplitReasoning("<think>\nLet me think.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(r.reasoning_content, "\nLet me think.\n");
  EXPECT_EQ(r.content, "\n\nThe answer is 4.");
  EXPECT_TRUE(r.has_reasoning);
  r = SplitReasoning("Let me think.\n</think>\n\n4", /*prompt_opened_think=*/true);
  EXPECT_EQ(r.reasoning_content, "Let me think.\n");
  EXPECT_EQ(r.content, "\n\n4");
  r = SplitReasoning("Just an answer.");
  EXPECT_EQ(r.reasoning_content, "");
  EXPECT_EQ(r.content, "Just an answer.");
  EXPECT_FALSE(r.has_reasoning);
  r = SplitReasoning("still thinking, truncated", true);
  EXPECT_EQ(r.reasoning_content, "still thinking, truncated");
  EXPECT_EQ(r.content, "");
  r = SplitReasoning("<think>a</think>b</think>c");
  EXPECT_EQ(r.reasoning_content, "a");
  EXPECT_EQ(r.content, "b</think>c");
  r = SplitReasoning("<thin");
  EXPECT_EQ(r.content, "<thin");
}

TEST(Reasoning, PromptOpensThink) {
  EXPECT_TRUE(ReasoningParser::PromptOpensThink("<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_FALSE(ReasoningParser::PromptOpensThink("<｜User｜>hi<｜Assistant｜>"));
  EXPECT_FALSE(ReasoningParser::PromptOpensThink("<think>a</think>b<｜Assistant｜>"));
  EXPECT_TRUE(ReasoningParser::PromptOpensThink("<think>a</think>b<｜Assistant｜><think>"));
}

TEST(Reasoning, StreamingEqualsWhole) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"<think>\nLet me think about 你好.\n</think>\n\nThe answer is 4.", false},
      {"reasoning here</think>answer", true},
      {"no tags at all < / > </thi", false},
      {"<think>never closed </thi", false},
      {"<th", false},
      {"</think>", true},
  };
  for (const auto& [text, opened] : cases) {
    auto whole = SplitReasoning(text, opened);
    // Every split into two deltas, and one byte at a time.
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      ReasoningParser p(opened);
      std::string rs, cs;
      for (const auto& d : {p.Feed(text.substr(0, cut)), p.Feed(text.substr(cut)), p.Flush()}) {
        rs += d.reasoning;
        cs += d.content;
      }
      EXPECT_EQ(rs, whole.reasoning_content) << text << " cut " << cut;
      EXPECT_EQ(cs, whole.content) << text << " cut " << cut;
    }
    ReasoningParser p(opened);
    std::string rs, cs;
    for (char c : text) {
      auto d = p.Feed(std::string(1, c));
      rs += d.reasoning;
      cs += d.content;
    }
    auto d = p.Flush();
    EXPECT_EQ(rs + d.reasoning, whole.reasoning_content);
    EXPECT_EQ(cs + d.content, whole.content);
  }
}

// ------------------------------------------------------------------------------------------
// CLI
// ------------------------------------------------------------------------------------------
std::string RunCmd(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

TEST(TokenizerCli, TokenizeDetokenize) {
  int rc = 0;
  std::string bin = DS_BINARY;
  std::string out = RunCmd(bin + " tokenize --tokenizer " + kModelDir +
                               " --text 'Hello world 12345 你好' --output json", &rc);
  ASSERT_EQ(rc, 0) << out;
  auto ids = json::parse(out)["ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids, Tok().Encode("Hello world 12345 你好"));
  out = RunCmd(bin + " tokenize --tokenizer " + kModelDir + " --text 'Hi' --add-special-tokens --output json", &rc);
  EXPECT_EQ(json::parse(out)["ids"].get<std::vector<int32_t>>(), Tok().Encode("Hi", true));

  std::string path = ::testing::TempDir() + "/tok_in.jsonl";
  {
    std::ofstream f(path);
    f << json{{"text", "first line"}}.dump() << "\n" << json{{"text", "第二行\n😀"}}.dump() << "\n"
      << json{{"text", ""}}.dump() << "\n";
  }
  out = RunCmd(bin + " tokenize --tokenizer " + kModelDir + " --input-jsonl " + path + " --output json", &rc);
  ASSERT_EQ(rc, 0);
  std::stringstream ss(out);
  std::string line;
  std::vector<std::string> texts = {"first line", "第二行\n😀", ""};
  size_t k = 0;
  while (std::getline(ss, line)) {
    ASSERT_LT(k, texts.size());
    EXPECT_EQ(json::parse(line)["ids"].get<std::vector<int32_t>>(), Tok().Encode(texts[k]));
    ++k;
  }
  EXPECT_EQ(k, texts.size());

  auto hello = Tok().Encode("Hello 😀");
  std::string csv;
  for (size_t i = 0; i < hello.size(); ++i) {
    if (i) csv += ",";
    csv += std::to_string(hello[i]);
  }
  out = RunCmd(bin + " detokenize --tokenizer " + kModelDir + " --ids " + csv + " --output json", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(json::parse(out)["text"], "Hello 😀");
  out = RunCmd(bin + " detokenize --tokenizer " + kModelDir + " --ids 1,x 2>&1", &rc);
  EXPECT_NE(rc, 0);
  out = RunCmd(bin + " tokenize --tokenizer /nonexistent --text a 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("NOT_FOUND"), std::string::npos) << out;
}

TEST(TokenizerCli, ChatTemplate) {
  int rc = 0;
  std::string path = ::testing::TempDir() + "/chat.json";
  {
    std::ofstream f(path);
    f << R"([{"role":"system","content":"S"},{"role":"user","content":"Hi"}])";
  }
  std::string out = RunCmd(std::string(DS_BINARY) + " chat-template --tokenizer " + kModelDir +
                               " --messages-json " + path + " --add-generation-prompt", &rc);
  ASSERT_EQ(rc, 0) << out;
  json j = json::parse(out);
  EXPECT_EQ(j["text"], "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜>");
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), Tok().Encode(j["text"].get<std::string>()));
}

}  // namespace
}  // namespace ds
