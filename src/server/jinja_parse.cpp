// Jinja subset: template lexer (whitespace control, trim/lstrip blocks) and parser (see jinja.h).
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "server/jinja_internal.h"

namespace ds::jinja {
namespace internal {

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string StripChars(const std::string& s, const std::string* chars, bool left, bool right) {
  auto in = [&](char c) { return chars ? chars->find(c) != std::string::npos : IsWs(c); };
  size_t b = 0, e = s.size();
  if (left) while (b < e && in(s[b])) ++b;
  if (right) while (e > b && in(s[e - 1])) --e;
  return s.substr(b, e - b);
}

namespace {

// ------------------------------------------------------------------------------------------
// Expression lexer / parser
// ------------------------------------------------------------------------------------------
struct Tok {
  enum Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind;
  std::string text;
};

std::vector<Tok> LexExpr(const std::string& s) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (IsWs(c)) { ++i; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::kName, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      std::string num = s.substr(i, j - i);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      out.push_back({is_float ? Tok::kFloat : Tok::kInt, num});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      while (j < s.size() && s[j] != c) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          char e = s[j + 1];
          switch (e) {
            case 'n': v += '\n'; break;
            case 't': v += '\t'; break;
            case 'r': v += '\r'; break;
            case '\\': v += '\\'; break;
            case '\'': v += '\''; break;
            case '"': v += '"'; break;
            case '0': v += '\0'; break;
            default: v += '\\'; v += e; break;
          }
          j += 2;
        } else {
          v += s[j++];
        }
      }
      if (j >= s.size()) throw SyntaxError("unterminated string literal");
      out.push_back({Tok::kString, v});
      i = j + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
      std::string op(1, c);
      for (const char* t : two)
        if (s.compare(i, 2, t) == 0) op = t;
      if (std::string("+-*/%~<>=()[]{}.,:|!").find(c) == std::string::npos)
        throw SyntaxError(std::string("unexpected character '") + c + "'");
      out.push_back({Tok::kOp, op});
      i += op.size();
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

ExprP Mk(Expr::Kind k) {
  auto e = std::make_shared<Expr>();
  e->kind = k;
  return e;
}

const std::vector<std::string> kFilters = {
    "length", "count", "trim", "tojson", "string", "lower", "upper", "title", "capitalize", "default",
    "d", "join", "first", "last", "list", "items", "reverse", "int", "float", "abs", "replace", "safe",
    "selectattr", "rejectattr", "map", "unique", "sort", "indent", "sum", "min", "max", "wordcount"};
const std::vector<std::string> kTests = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable",
    "sequence", "boolean", "true", "false", "odd", "even", "divisibleby", "eq", "equalto", "ne", "lt",
    "gt", "le", "ge", "in", "lower", "upper", "sameas", "callable"};

// Bounds recursion depth (parsers of untrusted templates must not overflow the stack).
struct Guard {
  explicit Guard(int* d) : d_(d) {
    if (++*d_ > 400) throw SyntaxError("template nested too deeply");
  }
  ~Guard() { --*d_; }
  int* d_;
};

class ExprParser {
 public:
  explicit ExprParser(const std::string& s) : t_(LexExpr(s)) {}
  ExprP ParseAll() {
    ExprP e = Parse();
    if (Peek().kind != Tok::kEnd) throw SyntaxError("unexpected '" + Peek().text + "' in expression");
    return e;
  }
  ExprP Parse() { return ParseCond(); }
  const Tok& Peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t k = 0) const { return Peek(k).kind == Tok::kOp && Peek(k).text == op; }
  bool IsName(const char* n, size_t k = 0) const { return Peek(k).kind == Tok::kName && Peek(k).text == n; }
  void Expect(const char* op) {
    if (!IsOp(op)) throw SyntaxError(std::string("expected '") + op + "' but got '" + Peek().text + "'");
    ++p_;
  }
  std::string ExpectName() {
    if (Peek().kind != Tok::kName) throw SyntaxError("expected a name, got '" + Peek().text + "'");
    return t_[p_++].text;
  }
  bool AtEnd() const { return Peek().kind == Tok::kEnd; }
  size_t pos() const { return p_; }

  // `a if c else b` (no `if` when parsing a for-loop's iterable: with_cond=false)
  ExprP ParseCond(bool with_cond = true) {
    Guard g(&depth_);
    ExprP e = ParseOr();
    while (with_cond && IsName("if")) {
      ++p_;
      ExprP c = ParseOr();
      ExprP other;
      if (IsName("else")) {
        ++p_;
        other = ParseCond();
      } else {
        other = Mk(Expr::kLit);
        other->negate = true;  // marks "undefined" literal
      }
      ExprP n = Mk(Expr::kCond);
      n->args = {c, e, other};
      e = n;
    }
    return e;
  }

 private:
  ExprP ParseOr() {
    ExprP e = ParseAnd();
    while (IsName("or")) {
      ++p_;
      ExprP n = Mk(Expr::kOr);
      n->args = {e, ParseAnd()};
      e = n;
    }
    return e;
  }
  ExprP ParseAnd() {
    ExprP e = ParseNot();
    while (IsName("and")) {
      ++p_;
      ExprP n = Mk(Expr::kAnd);
      n->args = {e, ParseNot()};
      e = n;
    }
    return e;
  }
  ExprP ParseNot() {
    Guard g(&depth_);
    if (IsName("not")) {
      ++p_;
      ExprP n = Mk(Expr::kNot);
      n->args = {ParseNot()};
      return n;
    }
    return ParseCompare();
  }
  ExprP ParseCompare() {
    ExprP e = ParseMath1();
    while (true) {
      std::string op;
      if (Peek().kind == Tok::kOp && (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
                                      Peek().text == ">" || Peek().text == "<=" || Peek().text == ">=")) {
        op = t_[p_++].text;
      } else if (IsName("in")) {
        ++p_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        p_ += 2;
        op = "notin";
      } else if (IsName("is")) {
        ++p_;
        ExprP n = Mk(Expr::kTest);
        if (IsName("not")) {
          ++p_;
          n->negate = true;
        }
        n->name = ExpectName();
        if (std::find(kTests.begin(), kTests.end(), n->name) == kTests.end())
          throw UnsupportedError("test '" + n->name + "'");
        n->args = {e};
        if (IsOp("(")) {
          ++p_;
          while (!IsOp(")")) {
            n->args.push_back(Parse());
            if (IsOp(",")) ++p_;
          }
          ++p_;
        } else if (Peek().kind == Tok::kString || Peek().kind == Tok::kInt || Peek().kind == Tok::kFloat ||
                   (Peek().kind == Tok::kName && !IsName("and") && !IsName("or") && !IsName("if") &&
                    !IsName("else") && !IsName("is") && !IsName("in") && !IsName("not"))) {
          n->args.push_back(ParseMath1());
        }
        e = n;
        continue;
      } else {
        break;
      }
      ExprP n = Mk(Expr::kBin);
      n->name = op;
      n->args = {e, ParseMath1()};
      e = n;
    }
    return e;
  }
  ExprP ParseMath1() {
    ExprP e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      ExprP n = Mk(Expr::kBin);
      n->name = t_[p_++].text;
      n->args = {e, ParseConcat()};
      e = n;
    }
    return e;
  }
  ExprP ParseConcat() {
    ExprP e = ParseMath2();
    while (IsOp("~")) {
      ++p_;
      ExprP n = Mk(Expr::kBin);
      n->name = "~";
      n->args = {e, ParseMath2()};
      e = n;
    }
    return e;
  }
  ExprP ParseMath2() {
    ExprP e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      ExprP n = Mk(Expr::kBin);
      n->name = t_[p_++].text;
      n->args = {e, ParsePow()};
      e = n;
    }
    return e;
  }
  ExprP ParsePow() {
    ExprP e = ParseUnary();
    while (IsOp("**")) {
      ++p_;
      ExprP n = Mk(Expr::kBin);
      n->name = "**";
      n->args = {e, ParseUnary()};
      e = n;
    }
    return e;
  }
  ExprP ParseUnary() {
    Guard g(&depth_);
    if (IsOp("-")) {
      ++p_;
      ExprP n = Mk(Expr::kNeg);
      n->args = {ParseUnary()};
      return ParseFilters(n);
    }
    if (IsOp("+")) {
      ++p_;
      return ParseUnary();
    }
    return ParseFilters(ParsePostfix(ParsePrimary()));
  }
  void ParseArgs(std::vector<ExprP>* args, std::vector<std::pair<std::string, ExprP>>* kwargs) {
    Expect("(");
    while (!IsOp(")")) {
      if (Peek().kind == Tok::kName && IsOp("=", 1)) {
        std::string k = t_[p_].text;
        p_ += 2;
        kwargs->push_back({k, Parse()});
      } else {
        args->push_back(Parse());
      }
      if (IsOp(",")) ++p_;
      else if (!IsOp(")")) throw SyntaxError("expected ',' or ')' in call");
    }
    ++p_;
  }
  ExprP ParseFilters(ExprP e) {
    while (IsOp("|")) {
      ++p_;
      ExprP n = Mk(Expr::kFilter);
      n->name = ExpectName();
      if (std::find(kFilters.begin(), kFilters.end(), n->name) == kFilters.end())
        throw UnsupportedError("filter '" + n->name + "'");
      n->args = {e};
      if (IsOp("(")) ParseArgs(&n->args, &n->kwargs);
      e = ParsePostfix(n);
    }
    return e;
  }
  ExprP ParsePostfix(ExprP e) {
    while (true) {
      if (IsOp(".")) {
        ++p_;
        ExprP n = Mk(Expr::kAttr);
        if (Peek().kind == Tok::kInt) n->name = t_[p_++].text;
        else n->name = ExpectName();
        n->args = {e};
        e = n;
      } else if (IsOp("[")) {
        ++p_;
        ExprP a, b, c;
        bool slice = false;
        if (!IsOp(":")) a = Parse();
        if (IsOp(":")) {
          slice = true;
          ++p_;
          if (!IsOp("]") && !IsOp(":")) b = Parse();
          if (IsOp(":")) {
            ++p_;
            if (!IsOp("]")) c = Parse();
          }
        }
        Expect("]");
        ExprP n = Mk(slice ? Expr::kSlice : Expr::kItem);
        n->args = {e, a, b, c};
        e = n;
      } else if (IsOp("(")) {
        ExprP n = Mk(Expr::kCall);
        n->args = {e};
        ParseArgs(&n->args, &n->kwargs);
        e = n;
      } else {
        return e;
      }
    }
  }
  ExprP ParsePrimary() {
    const Tok& t = Peek();
    if (t.kind == Tok::kString) {
      ExprP n = Mk(Expr::kLit);
      std::string s;
      while (Peek().kind == Tok::kString) s += t_[p_++].text;  // adjacent literals concatenate
      n->lit = s;
      return n;
    }
    if (t.kind == Tok::kInt) {
      ExprP n = Mk(Expr::kLit);
      n->lit = std::stoll(t.text);
      ++p_;
      return n;
    }
    if (t.kind == Tok::kFloat) {
      ExprP n = Mk(Expr::kLit);
      n->lit = std::stod(t.text);
      ++p_;
      return n;
    }
    if (t.kind == Tok::kName) {
      ++p_;
      ExprP n = Mk(Expr::kLit);
      if (t.text == "true" || t.text == "True") { n->lit = true; return n; }
      if (t.text == "false" || t.text == "False") { n->lit = false; return n; }
      if (t.text == "none" || t.text == "None") { n->lit = nullptr; return n; }
      n->kind = Expr::kName;
      n->name = t.text;
      return n;
    }
    if (IsOp("(")) {
      ++p_;
      ExprP e = Parse();
      if (IsOp(",")) {  // tuple -> list
        ExprP l = Mk(Expr::kList);
        l->args.push_back(e);
        while (IsOp(",")) {
          ++p_;
          if (IsOp(")")) break;
          l->args.push_back(Parse());
        }
        e = l;
      }
      Expect(")");
      return e;
    }
    if (IsOp("[")) {
      ++p_;
      ExprP l = Mk(Expr::kList);
      while (!IsOp("]")) {
        l->args.push_back(Parse());
        if (IsOp(",")) ++p_;
        else if (!IsOp("]")) throw SyntaxError("expected ',' or ']'");
      }
      ++p_;
      return l;
    }
    if (IsOp("{")) {
      ++p_;
      ExprP d = Mk(Expr::kDict);
      while (!IsOp("}")) {
        d->args.push_back(Parse());
        Expect(":");
        d->args.push_back(Parse());
        if (IsOp(",")) ++p_;
        else if (!IsOp("}")) throw SyntaxError("expected ',' or '}'");
      }
      ++p_;
      return d;
    }
    throw SyntaxError("unexpected '" + t.text + "'");
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  int depth_ = 0;
};

using Node = Template::Node;

struct RawTag {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string content;
};

// Splits the source into text / {{ }} / {% %} pieces with Jinja's lexer rules for '-'
// whitespace control, trim_blocks (a block or comment end eats one "\n"), lstrip_blocks
// (blanks between a line start and a block/comment tag are dropped) and
// keep_trailing_newline=False (one trailing "\n" of the source is dropped).
std::vector<RawTag> SplitTemplate(std::string src) {
  if (!src.empty() && src.back() == '\n') src.pop_back();
  std::vector<RawTag> out;
  size_t i = 0;
  bool strip_next = false;    // previous tag ended with '-'
  bool trim_nl = false;       // previous tag was a block/comment (trim_blocks)
  bool line_starting = true;  // the previous token's match ended with "\n" (or template start)
  while (true) {
    size_t open = i;
    while (true) {
      open = src.find('{', open);
      if (open == std::string::npos || open + 1 >= src.size()) {
        open = std::string::npos;
        break;
      }
      char k = src[open + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++open;
    }
    std::string text = src.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && IsWs(text[k])) ++k;
      line_starting = k > 0 ? text[k - 1] == '\n' : line_starting;
      text.erase(0, k);
    } else if (trim_nl && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
      line_starting = true;
    }
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({RawTag::kText, text});
      break;
    }
    char kind = src[open + 1];
    char sign = open + 2 < src.size() ? src[open + 2] : 0;
    bool minus_left = sign == '-', plus_left = sign == '+' && kind != '{';
    if (minus_left) {
      size_t e = text.size();
      while (e > 0 && IsWs(text[e - 1])) --e;
      text.erase(e);
    } else if (kind != '{' && !plus_left) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if (l_pos > 0 || line_starting) {
        bool blank = true;
        for (size_t k = l_pos; k < text.size(); ++k) blank = blank && (text[k] == ' ' || text[k] == '\t');
        if (blank) text.erase(l_pos);
      }
    }
    if (!text.empty()) out.push_back({RawTag::kText, text});
    std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t body_start = open + 2 + ((minus_left || plus_left) ? 1 : 0);
    size_t end = std::string::npos;
    if (kind == '#') {
      end = src.find("#}", body_start);
    } else {
      char quote = 0;
      for (size_t j = body_start; j + 1 < src.size(); ++j) {
        char c = src[j];
        if (quote) {
          if (c == '\\') ++j;
          else if (c == quote) quote = 0;
        } else if (c == '\'' || c == '"') {
          quote = c;
        } else if (src.compare(j, 2, close) == 0) {
          end = j;
          break;
        }
      }
    }
    if (end == std::string::npos) throw SyntaxError("unclosed '{" + std::string(1, kind) + "'");
    bool minus_right = end > body_start && src[end - 1] == '-';
    std::string body = src.substr(body_start, end - body_start - (minus_right ? 1 : 0));
    if (kind == '{') out.push_back({RawTag::kExpr, body});
    else if (kind == '%') out.push_back({RawTag::kStmt, body});
    strip_next = minus_right;
    trim_nl = kind != '{';
    line_starting = false;
    i = end + 2;
  }
  return out;
}

std::string Trim(const std::string& s) { return StripChars(s, nullptr, true, true); }

class Parser {
 public:
  explicit Parser(std::vector<RawTag> tags) : tags_(std::move(tags)) {}
  std::unique_ptr<Node> ParseRoot() {
    auto body = ParseBody({});
    if (pos_ < tags_.size()) throw SyntaxError("unexpected '{% " + tags_[pos_].content + " %}'");
    return body;
  }

 private:
  static std::string Keyword(const std::string& stmt) {
    std::string s = Trim(stmt);
    size_t k = 0;
    while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '_')) ++k;
    return s.substr(0, k);
  }
  // Parses until a statement whose keyword is in `stops` (left unconsumed).
  std::unique_ptr<Node> ParseBody(const std::vector<std::string>& stops) {
    Guard g(&depth_);
    auto body = std::make_unique<Node>();
    body->kind = Node::kBody;
    while (pos_ < tags_.size()) {
      const RawTag& t = tags_[pos_];
      if (t.kind == RawTag::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->text = t.content;
        body->children.push_back(std::move(n));
        ++pos_;
      } else if (t.kind == RawTag::kExpr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kOutput;
        n->exprs.push_back(ExprParser(t.content).ParseAll());
        body->children.push_back(std::move(n));
        ++pos_;
      } else {
        std::string kw = Keyword(t.content);
        if (std::find(stops.begin(), stops.end(), kw) != stops.end()) return body;
        body->children.push_back(ParseStmt(kw));
      }
    }
    if (!stops.empty()) throw SyntaxError("missing '{% " + stops.back() + " %}'");
    return body;
  }
  std::unique_ptr<Node> ParseStmt(const std::string& kw) {
    std::string rest = Trim(Trim(tags_[pos_].content).substr(kw.size()));
    ++pos_;
    auto n = std::make_unique<Node>();
    if (kw == "if") {
      n->kind = Node::kIf;
      n->exprs.push_back(ExprParser(rest).ParseAll());
      n->children.push_back(ParseBody({"elif", "else", "endif"}));
      while (true) {
        std::string k = Keyword(tags_[pos_].content);
        std::string r = Trim(Trim(tags_[pos_].content).substr(k.size()));
        ++pos_;
        if (k == "elif") {
          n->exprs.push_back(ExprParser(r).ParseAll());
          n->children.push_back(ParseBody({"elif", "else", "endif"}));
        } else if (k == "else") {
          n->children.push_back(ParseBody({"endif"}));
        } else {
          break;  // endif
        }
      }
      return n;
    }
    if (kw == "for") {
      n->kind = Node::kFor;
      ExprParser p(rest);
      n->targets.push_back(p.ExpectName());
      while (p.IsOp(",")) {
        p.Expect(",");
        n->targets.push_back(p.ExpectName());
      }
      if (!p.IsName("in")) throw SyntaxError("expected 'in' in for");
      p.ExpectName();
      n->exprs.push_back(p.ParseCond(false));
      if (p.IsName("if")) {
        p.ExpectName();
        n->exprs.push_back(p.ParseCond(false));
      }
      if (p.IsName("recursive")) throw UnsupportedError("recursive for loops");
      if (!p.AtEnd()) throw SyntaxError("unexpected tokens in for");
      n->children.push_back(ParseBody({"else", "endfor"}));
      if (Keyword(tags_[pos_].content) == "else") {
        ++pos_;
        n->children.push_back(ParseBody({"endfor"}));
      }
      ++pos_;
      return n;
    }
    if (kw == "set") {
      ExprParser p(rest);
      std::string name = p.ExpectName();
      std::string attr;
      if (p.IsOp(".")) {
        p.Expect(".");
        attr = p.ExpectName();
      }
      if (p.AtEnd()) {  // block set
        n->kind = Node::kSetBlock;
        n->text = name;
        n->children.push_back(ParseBody({"endset"}));
        ++pos_;
        return n;
      }
      if (p.IsOp(",")) throw UnsupportedError("tuple assignment in set");
      p.Expect("=");
      n->kind = Node::kSet;
      n->text = name;
      n->attr = attr;
      n->exprs.push_back(p.Parse());
      if (!p.AtEnd()) throw SyntaxError("unexpected tokens in set");
      return n;
    }
    if (kw == "macro") {
      ExprParser p(rest);
      n->kind = Node::kMacro;
      n->text = p.ExpectName();
      p.Expect("(");
      while (!p.IsOp(")")) {
        n->targets.push_back(p.ExpectName());
        if (p.IsOp("=")) {
          p.Expect("=");
          n->exprs.push_back(p.Parse());
        } else {
          n->exprs.push_back(nullptr);
        }
        if (p.IsOp(",")) p.Expect(",");
      }
      n->children.push_back(ParseBody({"endmacro"}));
      ++pos_;
      return n;
    }
    if (kw == "generation") {
      auto b = ParseBody({"endgeneration"});
      ++pos_;
      return b;
    }
    if (kw == "break" || kw == "continue") {
      n->kind = kw == "break" ? Node::kBreak : Node::kContinue;
      return n;
    }
    throw UnsupportedError("statement '{% " + kw + " %}'");
  }

  std::vector<RawTag> tags_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::unique_ptr<Template::Node> ParseTemplate(const std::string& source) {
  return Parser(SplitTemplate(source)).ParseRoot();
}

}  // namespace internal
}  // namespace ds::jinja
