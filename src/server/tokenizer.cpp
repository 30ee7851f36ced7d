// Byte-level BPE tokenizer (see tokenizer.h for the semantics implemented and their source:
// the Hugging Face `tokenizers` library, whose behaviour this file reproduces exactly).
#include "server/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <deque>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "server/unicode_delta.h"

namespace ds {

using json = nlohmann::json;

// ------------------------------------------------------------------------------------------
// GPT-2 byte <-> unicode map (bytes_to_unicode)
// ------------------------------------------------------------------------------------------
namespace {

struct ByteMap {
  std::array<uint32_t, 256> byte_to_cp{};
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = printable ? b : 256 + n++;
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& GetByteMap() {
  static const ByteMap m;
  return m;
}

// Decodes one code point of valid UTF-8 at s[i]; advances i.
uint32_t NextCp(std::string_view s, size_t* i) {
  auto c = static_cast<unsigned char>(s[*i]);
  if (c < 0x80) { *i += 1; return c; }
  int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  uint32_t cp = c & (0x7F >> len);
  for (int k = 1; k < len && *i + k < s.size(); ++k) cp = (cp << 6) | (s[*i + k] & 0x3F);
  *i += len;
  return cp;
}

// The bytes a vocabulary string stands for: each character through the byte map; if any
// character is outside the map the string's own UTF-8 (HF ByteLevel decoder rule).
std::string ByteLevelToBytes(const std::string& tok, bool* ok) {
  const auto& m = GetByteMap();
  std::string out;
  size_t i = 0;
  while (i < tok.size()) {
    uint32_t cp = NextCp(tok, &i);
    auto it = m.cp_to_byte.find(cp);
    if (it == m.cp_to_byte.end()) {
      *ok = false;
      return tok;
    }
    out.push_back(static_cast<char>(it->second));
  }
  *ok = true;
  return out;
}

// ------------------------------------------------------------------------------------------
// Regex: PCRE2 (UTF + UCP + JIT) with Oniguruma's iteration semantics.
// ------------------------------------------------------------------------------------------

// "\p{X}" plus the code points Oniguruma's newer Unicode tables put in X (unicode_delta.h),
// as the inside of a character class; empty if X has no table here.
std::string ClassWithDelta(const std::string& name) {
  auto fmt = [](const unicode_delta::Range* r, size_t n, const std::string& prop) {
    std::string out = "\\p{" + prop + "}";
    char buf[48];
    for (size_t i = 0; i < n; ++i) {
      if (r[i].lo == 0 && r[i].hi == 0) continue;
      std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", r[i].lo, r[i].hi);
      out += buf;
    }
    return out;
  };
#define DS_DELTA(X) \
  if (name == #X) return fmt(unicode_delta::k##X, std::size(unicode_delta::k##X), #X);
  DS_DELTA(L) DS_DELTA(M) DS_DELTA(N) DS_DELTA(Nd) DS_DELTA(P) DS_DELTA(S) DS_DELTA(Z)
#undef DS_DELTA
  return "";
}

// Oniguruma (Ruby syntax, UTF-8) -> PCRE2. The classes whose meaning differs are rewritten to
// Oniguruma's definitions:
//   \s  = U+0009..U+000D, U+0085, Zs, Zl, Zp (PCRE2 UCP adds U+180E via \h)
//   \w  = L, M, Nd, Pc                       (PCRE2 10.42 UCP: L, N, '_')
//   \h  = hex digit in Ruby syntax           (PCRE2: horizontal space)
//   \d, \p{L|M|N|Nd|P|S|Z}: PCRE2's class plus the code points assigned after Unicode 14
//        that Oniguruma knows (unicode_delta.h), so both see the same Unicode version.
std::string TranslateOnigToPcre2(const std::string& p) {
  const std::string kSpace = "\\t-\\r\\x{85}" + ClassWithDelta("Z");  // \p{Z} = Zs, Zl, Zp
  const std::string kWord = ClassWithDelta("L") + ClassWithDelta("M") + ClassWithDelta("Nd") + "\\p{Pc}";
  const std::string kHex = "0-9a-fA-F";
  const std::string kDigit = ClassWithDelta("Nd");
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      std::string set;
      bool neg = false;
      size_t consumed = 2;
      switch (e) {
        case 's': set = kSpace; break;
        case 'S': set = kSpace; neg = true; break;
        case 'w': set = kWord; break;
        case 'W': set = kWord; neg = true; break;
        case 'h': set = kHex; break;
        case 'H': set = kHex; neg = true; break;
        case 'd': set = kDigit; break;
        case 'D': set = kDigit; neg = true; break;
        case 'p':
        case 'P': {
          size_t close = p.find('}', i + 2);
          if (i + 2 < p.size() && p[i + 2] == '{' && close != std::string::npos) {
            std::string name = p.substr(i + 3, close - i - 3);
            bool caret = !name.empty() && name[0] == '^';  // \p{^X} = \P{X}
            if (caret) name = name.substr(1);
            set = ClassWithDelta(name);
            neg = (e == 'P') != caret;
            consumed = close - i + 1;
          }
          break;
        }
        default: break;
      }
      if (!set.empty() && !in_class) {
        out += neg ? "[^" : "[";
        out += set;
        out += "]";
      } else if (!set.empty() && !neg) {
        out += set;
      } else {
        // Unknown escapes, and negated classes inside [...]: PCRE2's own meaning.
        out.append(p, i, consumed);
      }
      i += consumed - 1;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') { out += '^'; ++i; }
      if (i + 1 < p.size() && p[i + 1] == ']') { out += "\\]"; ++i; }
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

class Regex {
 public:
  static StatusOr<std::unique_ptr<Regex>> Compile(const std::string& onig_pattern) {
    std::string pat = TranslateOnigToPcre2(onig_pattern);
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                     PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof(buf));
      return InvalidArgument("tokenizer regex '" + onig_pattern + "' does not compile: " +
                             reinterpret_cast<char*>(buf) + " at offset " + std::to_string(off));
    }
    auto r = std::unique_ptr<Regex>(new Regex);
    r->code_ = code;
    r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return r;
  }
  ~Regex() { pcre2_code_free(code_); }

  // Calls fn(start, end) for each match in s, with Oniguruma's find_iter rules (an empty
  // match right after the previous match is skipped by advancing one character).
  template <typename Fn>
  void FindIter(std::string_view s, Fn&& fn) const {
    thread_local pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    size_t last_end = 0;
    size_t last_match_end = SIZE_MAX;
    const auto* subj = reinterpret_cast<PCRE2_SPTR>(s.data());
    while (last_end <= s.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, subj, s.size(), last_end, PCRE2_NO_UTF_CHECK, md, nullptr)
                    : pcre2_match(code_, subj, s.size(), last_end, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
        // JIT stack exhausted (or another JIT limit): the interpreter uses the heap.
        rc = pcre2_match(code_, subj, s.size(), last_end, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) return;
      DS_CHECK(rc >= 0) << "PCRE2 match failed with error " << rc << " on a " << s.size() << "-byte piece";
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t ms = ov[0], me = ov[1];
      if (ms == me && last_match_end == me) {
        if (last_end >= s.size()) return;
        size_t j = last_end;
        NextCp(s, &j);
        last_end = j;
        continue;
      }
      last_end = me;
      last_match_end = me;
      fn(ms, me);
      if (ms == me && me >= s.size()) return;
    }
  }

 private:
  Regex() = default;
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// ------------------------------------------------------------------------------------------
// Pre-tokenizer steps
// ------------------------------------------------------------------------------------------
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreStep {
  enum Kind { kSplit, kByteLevel } kind = kSplit;
  // Native matchers for the DeepSeek patterns, used on pure-ASCII pieces (where they are
  // trivially exact); other pieces go through the regex.
  enum Fast { kNone, kDigitRuns3, kNoAsciiMatch, kDeepSeekWords } fast = kNone;
  std::unique_ptr<Regex> regex;  // kSplit: the pattern; kByteLevel: GPT-2 regex if use_regex
  std::string literal;           // kSplit with a String pattern
  bool is_literal = false;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
};

struct Seg {
  size_t b, e;
  bool match;
};

}  // namespace

// ------------------------------------------------------------------------------------------
// Impl
// ------------------------------------------------------------------------------------------
struct Tokenizer::Impl {
  std::vector<PreStep> steps;
  std::unordered_map<std::string, int32_t> vocab;  // byte-level string -> id
  std::array<int32_t, 256> byte_id{};              // raw byte -> id of its one-char token
  // (left id << 32 | right id) -> (rank << 32 | new id), open addressing.
  std::vector<uint64_t> merge_keys, merge_vals;
  uint64_t merge_mask = 0;
  std::vector<std::string> post_single;  // TemplateProcessing "single" ("$A" = the sequence)
  std::unordered_map<std::string, std::vector<int32_t>> post_special;
  bool has_template = false;

  // Added-token tries: pass 0 = non-normalized tokens, pass 1 = normalized tokens.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into added_
  };
  std::vector<TrieNode> trie[2];
  std::array<bool, 256> first_byte[2]{};
  bool has_added[2] = {false, false};

  static uint64_t Hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  void BuildMerges(const std::vector<std::pair<uint64_t, uint64_t>>& m) {
    size_t cap = 1;
    while (cap < m.size() * 2 + 16) cap <<= 1;
    merge_keys.assign(cap, UINT64_MAX);
    merge_vals.assign(cap, 0);
    merge_mask = cap - 1;
    for (auto& [k, v] : m) {
      uint64_t h = Hash(k) & merge_mask;
      while (merge_keys[h] != UINT64_MAX && merge_keys[h] != k) h = (h + 1) & merge_mask;
      if (merge_keys[h] == k) continue;  // duplicate merge: the first (lowest rank) wins
      merge_keys[h] = k;
      merge_vals[h] = v;
    }
  }
  // Returns false if the pair has no merge.
  bool FindMerge(int32_t a, int32_t b, uint32_t* rank, int32_t* new_id) const {
    uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    uint64_t h = Hash(k) & merge_mask;
    while (true) {
      uint64_t kk = merge_keys[h];
      if (kk == k) {
        *rank = static_cast<uint32_t>(merge_vals[h] >> 32);
        *new_id = static_cast<int32_t>(merge_vals[h] & 0xffffffffu);
        return true;
      }
      if (kk == UINT64_MAX) return false;
      h = (h + 1) & merge_mask;
    }
  }

  void AddToTrie(int pass, const std::string& s, int32_t token_index) {
    auto& t = trie[pass];
    if (t.empty()) t.emplace_back();
    int32_t node = 0;
    for (unsigned char c : s) {
      auto& nx = t[node].next;
      auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, int32_t{-1}));
      if (it != nx.end() && it->first == c) {
        node = it->second;
      } else {
        int32_t nn = static_cast<int32_t>(t.size());
        nx.insert(it, {c, nn});
        t.emplace_back();
        node = nn;
      }
    }
    if (t[node].token < 0) t[node].token = token_index;  // first declared wins on duplicates
    first_byte[pass][static_cast<unsigned char>(s[0])] = true;
    has_added[pass] = true;
  }
  // Longest added token starting at text[i] in pass `pass`; returns its index or -1.
  int32_t LongestAt(int pass, std::string_view text, size_t i, size_t* len) const {
    const auto& t = trie[pass];
    int32_t node = 0, best = -1;
    for (size_t j = i; j < text.size(); ++j) {
      const auto& nx = t[node].next;
      auto c = static_cast<unsigned char>(text[j]);
      auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, int32_t{-1}));
      if (it == nx.end() || it->first != c) break;
      node = it->second;
      if (t[node].token >= 0) {
        best = t[node].token;
        *len = j + 1 - i;
      }
    }
    return best;
  }
};

namespace {
std::atomic<uint64_t> g_next_uid{1};

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Unicode White_Space (Rust char::is_whitespace), for lstrip/rstrip.
bool IsWhiteSpaceCp(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Rust char::is_alphanumeric || '_' (single_word boundaries), via PCRE2's Unicode tables.
bool IsWordCp(std::string_view ch) {
  static const auto re = [] {
    auto r = Regex::Compile("^[\\p{Alphabetic}\\p{N}_]");
    DS_CHECK(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }();
  bool hit = false;
  re->FindIter(ch, [&](size_t, size_t) { hit = true; });
  return hit;
}

std::string_view LastChar(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  return s.substr(i);
}
std::string_view FirstChar(std::string_view s) {
  if (s.empty()) return s;
  size_t i = 0;
  NextCp(s, &i);
  return s.substr(0, std::min(i, s.size()));
}

Status ParseBehavior(const std::string& b, Behavior* out) {
  if (b == "Removed") *out = Behavior::kRemoved;
  else if (b == "Isolated") *out = Behavior::kIsolated;
  else if (b == "MergedWithPrevious") *out = Behavior::kMergedWithPrevious;
  else if (b == "MergedWithNext") *out = Behavior::kMergedWithNext;
  else if (b == "Contiguous") *out = Behavior::kContiguous;
  else return Unimplemented("tokenizer.json: unknown Split behavior '" + b + "'");
  return Status::Ok();
}

// The DeepSeek-V3 word pattern (third Split of its pre-tokenizer).
const std::string kDeepSeekWordPattern =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

Status ParsePreTokenizer(const json& pt, std::vector<PreStep>* steps) {
  if (pt.is_null()) return Status::Ok();
  std::string type = pt.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : pt.at("pretokenizers")) DS_RETURN_IF_ERROR(ParsePreTokenizer(s, steps));
    return Status::Ok();
  }
  PreStep st;
  if (type == "Split") {
    st.kind = PreStep::kSplit;
    const auto& pat = pt.at("pattern");
    if (pat.contains("Regex")) {
      const std::string re = pat.at("Regex").get<std::string>();
      DS_ASSIGN_OR_RETURN(st.regex, Regex::Compile(re));
      // \p{N}{1,3}: in ASCII, runs of [0-9] cut every 3 digits.
      if (re == "\\p{N}{1,3}") st.fast = PreStep::kDigitRuns3;
      // A single class of non-ASCII ranges (the DeepSeek CJK/kana split) never matches ASCII.
      if (re == "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+") st.fast = PreStep::kNoAsciiMatch;
      if (re == kDeepSeekWordPattern) st.fast = PreStep::kDeepSeekWords;
    } else if (pat.contains("String")) {
      st.is_literal = true;
      st.literal = pat.at("String").get<std::string>();
    } else {
      return Unimplemented("tokenizer.json: Split pattern must be Regex or String");
    }
    DS_RETURN_IF_ERROR(ParseBehavior(pt.value("behavior", "Isolated"), &st.behavior));
    st.invert = pt.value("invert", false);
  } else if (type == "Digits") {
    st.kind = PreStep::kSplit;
    DS_ASSIGN_OR_RETURN(st.regex, Regex::Compile("\\p{N}"));
    st.behavior = pt.value("individual_digits", false) ? Behavior::kIsolated : Behavior::kContiguous;
  } else if (type == "ByteLevel") {
    st.kind = PreStep::kByteLevel;
    st.add_prefix_space = pt.value("add_prefix_space", true);
    if (pt.value("use_regex", true)) {
      DS_ASSIGN_OR_RETURN(st.regex, Regex::Compile(kGpt2Pattern));
    }
  } else {
    return Unimplemented("tokenizer.json: pre_tokenizer type '" + type + "' is not supported");
  }
  steps->push_back(std::move(st));
  return Status::Ok();
}

// kDeepSeekWordPattern's matches on a pure-ASCII piece, by hand: in ASCII \p{L} = [A-Za-z],
// \p{M} is empty, \p{P}|\p{S} = the 32 punctuation/symbol characters, \s = [\t-\r ].
// Alternatives are tried in order at each start position, with the backtracking the regex
// engine would do (see the comments); the regex path gives identical results (tests).
template <typename Add>
void AsciiDeepSeekWords(std::string_view s, Add&& add) {
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  auto punct = [](char c) {
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
  };
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  auto crlf = [](char c) { return c == '\r' || c == '\n'; };
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const char c = s[i];
    size_t e = 0;  // match end; 0 = no match at i
    // A1: [punct][A-Za-z]+
    if (punct(c) && i + 1 < n && letter(s[i + 1])) {
      e = i + 2;
      while (e < n && letter(s[e])) ++e;
    }
    // A2: [^\r\n L P S]? [L M]+ (greedy optional first, then without it)
    if (!e) {
      size_t k = i;
      if (!crlf(c) && !letter(c) && !punct(c) && i + 1 < n && letter(s[i + 1])) k = i + 1;
      if (letter(s[k])) {
        e = k + 1;
        while (e < n && letter(s[e])) ++e;
      }
    }
    // A3: ' '? [P S]+ [\r\n]*
    if (!e) {
      size_t k = (c == ' ' && i + 1 < n && punct(s[i + 1])) ? i + 1 : i;
      if (punct(s[k])) {
        e = k + 1;
        while (e < n && punct(s[e])) ++e;
        while (e < n && crlf(s[e])) ++e;
      }
    }
    if (!e && space(c)) {
      size_t j = i;
      while (j < n && space(s[j])) ++j;  // the whitespace run [i, j)
      // A4: \s* [\r\n]+ : \s* backs off to the last \r or \n of the run.
      for (size_t k = j; k > i; --k)
        if (crlf(s[k - 1])) {
          e = k;
          break;
        }
      // A5: \s+ (?!\S) : the whole run at the end of the piece, else all but its last char.
      if (!e) {
        if (j == n) e = j;
        else if (j - i >= 2) e = j - 1;
      }
      // A6: \s+
      if (!e) e = j;
    }
    if (e) {
      add(i, e);
      i = e;
    } else {
      ++i;
    }
  }
}

bool IsAscii(std::string_view s) {
  size_t i = 0, n = s.size();
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ULL) return false;
  }
  for (; i < n; ++i)
    if (static_cast<unsigned char>(s[i]) & 0x80) return false;
  return true;
}

// Matches of `st` in s as a full cover of s (HF Pattern::find_matches), then the behaviour.
void SplitPiece(const PreStep& st, std::string_view s, std::vector<Seg>* segs,
                std::vector<Seg>* out) {
  segs->clear();
  out->clear();
  if (s.empty()) return;
  size_t prev = 0;
  auto add = [&](size_t b, size_t e) {
    if (prev != b) segs->push_back({prev, b, false});
    segs->push_back({b, e, true});
    prev = e;
  };
  if (st.is_literal) {
    if (!st.literal.empty()) {
      size_t pos = 0;
      while ((pos = s.find(st.literal, pos)) != std::string_view::npos) {
        add(pos, pos + st.literal.size());
        pos += st.literal.size();
      }
    }
  } else if (st.fast != PreStep::kNone && IsAscii(s)) {
    if (st.fast == PreStep::kDigitRuns3) {
      size_t i = 0;
      while (i < s.size()) {
        if (s[i] < '0' || s[i] > '9') {
          ++i;
          continue;
        }
        size_t j = i;
        while (j < s.size() && j - i < 3 && s[j] >= '0' && s[j] <= '9') ++j;
        add(i, j);
        i = j;
      }
    } else if (st.fast == PreStep::kDeepSeekWords) {
      AsciiDeepSeekWords(s, add);
    }
  } else {
    st.regex->FindIter(s, add);
  }
  if (prev != s.size()) segs->push_back({prev, s.size(), false});
  if (st.invert)
    for (auto& g : *segs) g.match = !g.match;
  switch (st.behavior) {
    case Behavior::kIsolated:
      for (auto& g : *segs) out->push_back({g.b, g.e, false});
      break;
    case Behavior::kRemoved:
      for (auto& g : *segs)
        if (!g.match) out->push_back({g.b, g.e, false});
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& g : *segs) {
        if (g.match && !prev_match && !out->empty()) out->back().e = g.e;
        else out->push_back({g.b, g.e, false});
        prev_match = g.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t k = segs->size(); k-- > 0;) {
        auto& g = (*segs)[k];
        if (g.match && !prev_match && !out->empty()) out->back().b = g.b;
        else out->push_back({g.b, g.e, false});
        prev_match = g.match;
      }
      std::reverse(out->begin(), out->end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (auto& g : *segs) {
        if (g.match == prev_match && !out->empty()) out->back().e = g.e;
        else out->push_back({g.b, g.e, false});
        prev_match = g.match;
      }
      break;
    }
  }
}

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()), uid_(g_next_uid.fetch_add(1)) {}
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  DS_ASSIGN_OR_RETURN(std::string tj, ReadFile(dir + "/tokenizer.json"));
  std::string cj;
  auto c = ReadFile(dir + "/tokenizer_config.json");
  if (c.ok()) cj = std::move(c).value();
  auto t = FromJson(tj, cj);
  if (!t.ok()) return Status(t.status().code(), dir + ": " + t.status().message());
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const std::string& tokenizer_json,
                                                         const std::string& config_json) {
  json tj, cj;
  try {
    tj = json::parse(tokenizer_json);
    if (!config_json.empty()) cj = json::parse(config_json);
  } catch (const json::exception& e) {
    return DataLoss(std::string("tokenizer json does not parse: ") + e.what());
  }
  auto tok = std::unique_ptr<Tokenizer>(new Tokenizer);
  Impl& im = *tok->impl_;
  try {
    // Normalizer: only none / an empty Sequence.
    const json& norm = tj.contains("normalizer") ? tj["normalizer"] : json();
    if (!norm.is_null() && !(norm.value("type", "") == "Sequence" && norm["normalizers"].empty()))
      return Unimplemented("tokenizer.json: normalizer '" + norm.value("type", "?") +
                           "' is not supported");
    const json& model = tj.at("model");
    if (model.value("type", "BPE") != "BPE")
      return Unimplemented("tokenizer.json: model type '" + model.value("type", "") +
                           "' is not supported (only BPE)");
    if (!model.value("continuing_subword_prefix", json()).is_null() ||
        !model.value("end_of_word_suffix", json()).is_null() || model.value("byte_fallback", false) ||
        model.value("ignore_merges", false))
      return Unimplemented("tokenizer.json: BPE options (subword prefix/suffix, byte_fallback, "
                           "ignore_merges) are not supported");
    const json& dec = tj.contains("decoder") ? tj["decoder"] : json();
    if (!dec.is_null() && dec.value("type", "") != "ByteLevel")
      return Unimplemented("tokenizer.json: decoder '" + dec.value("type", "") + "' is not supported");
    DS_RETURN_IF_ERROR(ParsePreTokenizer(tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json(),
                                         &im.steps));

    // Vocabulary.
    int32_t max_id = -1;
    for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it) {
      int32_t id = it.value().get<int32_t>();
      im.vocab[it.key()] = id;
      max_id = std::max(max_id, id);
    }
    const json& added = tj.contains("added_tokens") ? tj["added_tokens"] : json::array();
    for (const auto& a : added) max_id = std::max(max_id, a.at("id").get<int32_t>());
    tok->id_to_token_.resize(max_id + 1);
    for (auto& [s, id] : im.vocab) tok->id_to_token_[id] = s;
    const auto& bm = GetByteMap();
    for (int b = 0; b < 256; ++b) {
      std::string s;
      uint32_t cp = bm.byte_to_cp[b];
      if (cp < 0x80) s.push_back(static_cast<char>(cp));
      else if (cp < 0x800) { s.push_back(static_cast<char>(0xC0 | (cp >> 6))); s.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
      auto it = im.vocab.find(s);
      im.byte_id[b] = it == im.vocab.end() ? -1 : it->second;
    }

    // Merges: "a b" strings or [a, b] pairs.
    std::vector<std::pair<uint64_t, uint64_t>> merges;
    uint32_t rank = 0;
    for (const auto& m : model.at("merges")) {
      std::string a, b;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return DataLoss("tokenizer.json: bad merge '" + s + "'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = m.at(0).get<std::string>();
        b = m.at(1).get<std::string>();
      }
      auto ia = im.vocab.find(a), ib = im.vocab.find(b), ic = im.vocab.find(a + b);
      if (ia == im.vocab.end() || ib == im.vocab.end() || ic == im.vocab.end())
        return DataLoss("tokenizer.json: merge '" + a + " " + b + "' uses a token not in the vocab");
      uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
      merges.push_back({key, (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(ic->second)});
      ++rank;
    }
    im.BuildMerges(merges);

    // Added tokens.
    for (const auto& a : added) {
      AddedToken t;
      t.content = a.at("content").get<std::string>();
      t.id = a.at("id").get<int32_t>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", !t.special);
      t.single_word = a.value("single_word", false);
      if (t.content.empty()) continue;
      tok->id_to_token_[t.id] = t.content;
      int32_t idx = static_cast<int32_t>(tok->added_.size());
      tok->added_.push_back(t);
      im.AddToTrie(t.normalized ? 1 : 0, t.content, idx);
    }

    // Decoding bytes and the special flags.
    tok->id_to_bytes_.resize(tok->id_to_token_.size());
    tok->is_special_.assign(tok->id_to_token_.size(), 0);
    for (size_t id = 0; id < tok->id_to_token_.size(); ++id) {
      bool ok = false;
      tok->id_to_bytes_[id] = ByteLevelToBytes(tok->id_to_token_[id], &ok);
    }
    for (const auto& t : tok->added_) tok->is_special_[t.id] = t.special ? 1 : 0;

    // Post-processor: TemplateProcessing (single) if declared.
    const json& pp = tj.contains("post_processor") ? tj["post_processor"] : json();
    if (!pp.is_null() && pp.value("type", "") == "TemplateProcessing") {
      im.has_template = true;
      for (const auto& piece : pp.at("single")) {
        if (piece.contains("SpecialToken")) im.post_single.push_back(piece["SpecialToken"].at("id").get<std::string>());
        else im.post_single.push_back("$A");
      }
      for (auto it = pp.at("special_tokens").begin(); it != pp.at("special_tokens").end(); ++it)
        im.post_special[it.key()] = it.value().at("ids").get<std::vector<int32_t>>();
    } else if (!pp.is_null() && pp.value("type", "") != "ByteLevel") {
      return Unimplemented("tokenizer.json: post_processor '" + pp.value("type", "") +
                           "' is not supported");
    }

    // tokenizer_config.json: bos/eos, add_bos_token, chat_template.
    auto token_text = [](const json& v) -> std::string {
      if (v.is_string()) return v.get<std::string>();
      if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
      return "";
    };
    if (cj.is_object()) {
      if (cj.contains("bos_token")) tok->bos_token_ = token_text(cj["bos_token"]);
      if (cj.contains("eos_token")) tok->eos_token_ = token_text(cj["eos_token"]);
      tok->add_bos_ = cj.value("add_bos_token", false);
      tok->add_eos_ = cj.value("add_eos_token", false);
      if (cj.contains("chat_template")) {
        const json& ct = cj["chat_template"];
        if (ct.is_string()) {
          tok->chat_template_ = ct.get<std::string>();
        } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
          for (const auto& e : ct)
            if (e.value("name", "") == "default") tok->chat_template_ = e.value("template", "");
        }
      }
    }
    if (!tok->bos_token_.empty()) tok->bos_id_ = tok->TokenToId(tok->bos_token_);
    if (!tok->eos_token_.empty()) tok->eos_id_ = tok->TokenToId(tok->eos_token_);
  } catch (const json::exception& e) {
    return DataLoss(std::string("tokenizer json has an unexpected structure: ") + e.what());
  }
  return tok;
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || id_to_token_[id].empty()) return std::nullopt;
  return id_to_token_[id];
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  for (const auto& a : added_)
    if (a.content == token) return a.id;
  auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && is_special_[id];
}

std::string_view Tokenizer::TokenBytes(int32_t id, bool skip_special) const {
  if (id < 0 || id >= vocab_size()) return {};
  if (skip_special && is_special_[id]) return {};
  return id_to_bytes_[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) bytes.append(TokenBytes(id, skip_special));
  return Utf8Lossy(bytes);
}

// ------------------------------------------------------------------------------------------
// Encoding
// ------------------------------------------------------------------------------------------
namespace {
// Per-thread cache of BPE results per pre-token (word), as HF's BPE cache: open addressing
// over a flat arena, no allocation per lookup. Cleared when full.
constexpr size_t kCacheSlots = 1 << 17;
constexpr size_t kCacheMaxWords = kCacheSlots / 2;
constexpr size_t kCacheMaxWordLen = 64;
struct WordCache {
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint32_t key_off, key_len, ids_off, ids_len;
  };
  uint64_t owner = 0;
  std::vector<Slot> slots;
  std::string keys;
  std::vector<int32_t> ids;
  size_t used = 0;
  void Reset() {
    slots.assign(kCacheSlots, Slot{});
    keys.clear();
    ids.clear();
    used = 0;
  }
  static uint64_t HashOf(std::string_view w) { return std::hash<std::string_view>()(w) | 1; }
  const Slot* Find(std::string_view w, uint64_t h) const {
    size_t i = h & (kCacheSlots - 1);
    while (slots[i].hash != 0) {
      const Slot& sl = slots[i];
      if (sl.hash == h && sl.key_len == w.size() && std::memcmp(keys.data() + sl.key_off, w.data(), w.size()) == 0)
        return &sl;
      i = (i + 1) & (kCacheSlots - 1);
    }
    return nullptr;
  }
  void Insert(std::string_view w, uint64_t h, const int32_t* v, size_t n) {
    if (used >= kCacheMaxWords) Reset();
    size_t i = h & (kCacheSlots - 1);
    while (slots[i].hash != 0) i = (i + 1) & (kCacheSlots - 1);
    slots[i] = Slot{h, static_cast<uint32_t>(keys.size()), static_cast<uint32_t>(w.size()),
                    static_cast<uint32_t>(ids.size()), static_cast<uint32_t>(n)};
    keys.append(w);
    ids.insert(ids.end(), v, v + n);
    ++used;
  }
};

struct Sym {
  int32_t id;
  int32_t prev, next;
  bool alive;
};
struct MergeItem {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator>(const MergeItem& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};
}  // namespace

void Tokenizer::BpeWord(std::string_view word, std::vector<int32_t>* out) const {
  const Impl& im = *impl_;
  if (word.size() == 1) {
    int32_t id = im.byte_id[static_cast<unsigned char>(word[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  // A few caches per thread, one per tokenizer instance in use on it.
  thread_local std::array<WordCache, 4> caches;
  thread_local size_t next_victim = 0;
  WordCache* cp = nullptr;
  for (auto& c : caches)
    if (c.owner == uid_) cp = &c;
  if (!cp) {
    cp = &caches[next_victim++ % caches.size()];
    cp->Reset();
    cp->owner = uid_;
  }
  WordCache& cache = *cp;
  bool cacheable = word.size() <= kCacheMaxWordLen;
  uint64_t h = 0;
  if (cacheable) {
    h = WordCache::HashOf(word);
    if (const auto* sl = cache.Find(word, h)) {
      out->insert(out->end(), cache.ids.begin() + sl->ids_off, cache.ids.begin() + sl->ids_off + sl->ids_len);
      return;
    }
  }
  thread_local std::vector<Sym> syms;
  thread_local std::vector<MergeItem> heap;
  syms.clear();
  heap.clear();
  for (unsigned char c : word) {
    int32_t id = im.byte_id[c];
    if (id < 0) continue;  // no unk token: HF drops characters missing from the vocab
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1, true});
  }
  if (!syms.empty()) syms.back().next = -1;
  const int32_t n = static_cast<int32_t>(syms.size());
  auto cmp = std::greater<MergeItem>();
  uint32_t rank;
  int32_t new_id;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (im.FindMerge(syms[i].id, syms[i + 1].id, &rank, &new_id)) heap.push_back({rank, i, new_id});
  std::make_heap(heap.begin(), heap.end(), cmp);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    MergeItem top = heap.back();
    heap.pop_back();
    Sym& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    int32_t nx = cur.next;
    if (!im.FindMerge(cur.id, syms[nx].id, &rank, &new_id) || new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.next = syms[nx].next;
    syms[nx].alive = false;
    if (cur.next >= 0) syms[cur.next].prev = top.pos;
    if (cur.prev >= 0 && im.FindMerge(syms[cur.prev].id, cur.id, &rank, &new_id)) {
      heap.push_back({rank, cur.prev, new_id});
      std::push_heap(heap.begin(), heap.end(), cmp);
    }
    if (cur.next >= 0 && im.FindMerge(cur.id, syms[cur.next].id, &rank, &new_id)) {
      heap.push_back({rank, top.pos, new_id});
      std::push_heap(heap.begin(), heap.end(), cmp);
    }
  }
  size_t start = out->size();
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = syms[i].next) out->push_back(syms[i].id);
  if (cacheable) cache.Insert(word, h, out->data() + start, out->size() - start);
}

void Tokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const {
  const auto& steps = impl_->steps;
  if (text.empty()) return;
  // Per-depth scratch, reused across calls in this thread.
  thread_local std::vector<std::vector<Seg>> segs, outs;
  thread_local std::deque<std::string> prefixed;  // strings made by ByteLevel add_prefix_space
  if (segs.size() < steps.size() + 1) {
    segs.resize(steps.size() + 1);
    outs.resize(steps.size() + 1);
  }
  auto run = [&](auto&& self, std::string_view piece, size_t depth) -> void {
    if (piece.empty()) return;
    if (depth == steps.size()) {
      BpeWord(piece, out);
      return;
    }
    const PreStep& st = steps[depth];
    if (st.kind == PreStep::kByteLevel) {
      std::string_view p = piece;
      if (st.add_prefix_space && piece[0] != ' ') {
        prefixed.emplace_back(" ");
        prefixed.back().append(piece);
        p = prefixed.back();
      }
      if (!st.regex) {
        self(self, p, depth + 1);
      } else {
        // Own vector: the per-depth scratch is reused by the recursive calls.
        std::vector<Seg> pieces;
        size_t prev = 0;
        st.regex->FindIter(p, [&](size_t b, size_t e) {
          if (prev != b) pieces.push_back({prev, b, false});
          pieces.push_back({b, e, true});
          prev = e;
        });
        if (prev != p.size()) pieces.push_back({prev, p.size(), false});
        for (auto& s : pieces) self(self, p.substr(s.b, s.e - s.b), depth + 1);
      }
      return;
    }
    std::vector<Seg>& o = outs[depth];
    SplitPiece(st, piece, &segs[depth], &o);
    // Recursion reuses deeper levels only, so iterating o here is safe.
    for (size_t k = 0; k < o.size(); ++k) self(self, piece.substr(o[k].b, o[k].e - o[k].b), depth + 1);
  };
  run(run, text, 0);
  prefixed.clear();
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text_in, bool add_special_tokens,
                                       bool parse_special) const {
  std::string fixed;
  std::string_view text = text_in;
  if (!IsValidUtf8(text)) {
    fixed = Utf8Lossy(text);
    text = fixed;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  const Impl& im = *impl_;

  // Pass 0 splits on the non-normalized added tokens, pass 1 splits the gaps on the
  // normalized ones (HF AddedVocabulary::extract_and_normalize), pass 2 is ordinary text.
  auto split = [&](auto&& self, int pass, std::string_view s) -> void {
    if (s.empty()) return;
    if (pass >= 2) {
      EncodeOrdinary(s, &ids);
      return;
    }
    if (!im.has_added[pass]) {
      self(self, pass + 1, s);
      return;
    }
    size_t start_offset = 0, i = 0;
    while (i < s.size()) {
      if (!im.first_byte[pass][static_cast<unsigned char>(s[i])]) {
        ++i;
        continue;
      }
      size_t len = 0;
      int32_t ti = im.LongestAt(pass, s, i, &len);
      if (ti < 0) {
        ++i;
        continue;
      }
      const AddedToken& t = added_[ti];
      size_t start = i, stop = i + len;
      i = stop;  // the scan resumes after the match, whether it is used or not
      if (!parse_special && t.special) continue;
      if (t.single_word) {
        bool start_space = start == 0 || !IsWordCp(LastChar(s.substr(0, start)));
        bool stop_space = stop == s.size() || !IsWordCp(FirstChar(s.substr(stop)));
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t ns = start;
        while (ns > 0) {
          std::string_view lc = LastChar(s.substr(0, ns));
          size_t k = 0;
          if (!IsWhiteSpaceCp(NextCp(lc, &k))) break;
          ns -= lc.size();
        }
        start = std::max(ns, start_offset);
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          size_t k = stop;
          if (!IsWhiteSpaceCp(NextCp(s, &k))) break;
          stop = k;
        }
      }
      if (start_offset < start) self(self, pass + 1, s.substr(start_offset, start - start_offset));
      ids.push_back(t.id);
      start_offset = stop;
      i = std::max(i, stop);
    }
    if (start_offset < s.size()) self(self, pass + 1, s.substr(start_offset));
  };

  split(split, 0, text);
  if (!add_special_tokens) return ids;
  std::vector<int32_t> res;
  if (im.has_template) {
    for (const auto& p : im.post_single) {
      if (p == "$A") {
        res.insert(res.end(), ids.begin(), ids.end());
      } else {
        auto it = im.post_special.find(p);
        if (it != im.post_special.end()) res.insert(res.end(), it->second.begin(), it->second.end());
      }
    }
    return res;
  }
  if (add_bos_ && bos_id_) res.push_back(*bos_id_);
  res.insert(res.end(), ids.begin(), ids.end());
  if (add_eos_ && eos_id_) res.push_back(*eos_id_);
  return res;
}

}  // namespace ds
