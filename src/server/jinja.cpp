// Jinja2 subset interpreter for chat templates (see jinja.h).
#include "server/jinja.h"
#include "server/jinja_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace ds::jinja {

using ojson = nlohmann::ordered_json;

using namespace internal;  // NOLINT

namespace {

using Node = Template::Node;

// ------------------------------------------------------------------------------------------
// Values
// ------------------------------------------------------------------------------------------
struct Val {
  ojson j;
  bool undef = false;
  static Val Undef() {
    Val v;
    v.undef = true;
    return v;
  }
  Val() = default;
  Val(ojson x) : j(std::move(x)) {}  // NOLINT
};

std::string PyRepr(const ojson& j);

std::string PyFloat(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string PyStr(const Val& v) {
  if (v.undef) return "";
  const ojson& j = v.j;
  if (j.is_string()) return j.get<std::string>();
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  if (j.is_number_unsigned()) return std::to_string(j.get<uint64_t>());
  if (j.is_number_float()) return PyFloat(j.get<double>());
  return PyRepr(j);
}

std::string PyStrRepr(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == q) { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + q;
}

std::string PyRepr(const ojson& j) {
  if (j.is_string()) return PyStrRepr(j.get<std::string>());
  if (j.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + PyRepr(j[i]);
    return s + "]";
  }
  if (j.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      s += (first ? "" : ", ") + PyStrRepr(it.key()) + ": " + PyRepr(it.value());
      first = false;
    }
    return s + "}";
  }
  return PyStr(Val(j));
}

// json.dumps(x, ensure_ascii=False, indent=indent, separators=..., sort_keys=...)
void PyJsonDump(const ojson& j, int indent, const std::string& item_sep, const std::string& key_sep,
                bool sort_keys, int depth, std::string* out) {
  auto nl = [&](int d) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  if (j.is_object()) {
    if (j.empty()) { *out += "{}"; return; }
    *out += '{';
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    if (sort_keys) std::sort(keys.begin(), keys.end());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i) *out += item_sep;
      nl(depth + 1);
      PyJsonDump(ojson(keys[i]), indent, item_sep, key_sep, sort_keys, depth + 1, out);
      *out += key_sep;
      PyJsonDump(j.at(keys[i]), indent, item_sep, key_sep, sort_keys, depth + 1, out);
    }
    nl(depth);
    *out += '}';
  } else if (j.is_array()) {
    if (j.empty()) { *out += "[]"; return; }
    *out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) *out += item_sep;
      nl(depth + 1);
      PyJsonDump(j[i], indent, item_sep, key_sep, sort_keys, depth + 1, out);
    }
    nl(depth);
    *out += ']';
  } else if (j.is_string()) {
    *out += '"';
    for (unsigned char c : j.get_ref<const std::string&>()) {
      switch (c) {
        case '"': *out += "\\\""; break;
        case '\\': *out += "\\\\"; break;
        case '\n': *out += "\\n"; break;
        case '\r': *out += "\\r"; break;
        case '\t': *out += "\\t"; break;
        case '\b': *out += "\\b"; break;
        case '\f': *out += "\\f"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            *out += buf;
          } else {
            *out += static_cast<char>(c);
          }
      }
    }
    *out += '"';
  } else if (j.is_null()) {
    *out += "null";
  } else if (j.is_boolean()) {
    *out += j.get<bool>() ? "true" : "false";
  } else if (j.is_number_float()) {
    *out += PyFloat(j.get<double>());
  } else {
    *out += j.dump();
  }
}

bool Truthy(const Val& v) {
  if (v.undef) return false;
  const ojson& j = v.j;
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number()) return j.get<double>() != 0;
  if (j.is_string() || j.is_array() || j.is_object()) return !j.empty();
  return true;
}

[[noreturn]] void Fail(const std::string& m) { throw RenderError(m); }

const ojson& Need(const Val& v, const char* what) {
  if (v.undef) Fail(std::string("undefined value used in ") + what);
  return v.j;
}

// UTF-8 code points of a string (for slicing, length, iteration as Python does).
std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::vector<Val> Iterate(const Val& v) {
  std::vector<Val> out;
  if (v.undef || v.j.is_null()) {
    if (v.j.is_null() && !v.undef) Fail("'NoneType' object is not iterable");
    return out;
  }
  if (v.j.is_array()) {
    for (const auto& e : v.j) out.emplace_back(e);
  } else if (v.j.is_object()) {
    for (auto it = v.j.begin(); it != v.j.end(); ++it) out.emplace_back(ojson(it.key()));
  } else if (v.j.is_string()) {
    for (auto& c : CodePoints(v.j.get<std::string>())) out.emplace_back(ojson(c));
  } else {
    Fail("value is not iterable");
  }
  return out;
}

ojson SplitStr(const std::string& s, const std::string* sep, int64_t maxsplit) {
  ojson out = ojson::array();
  if (!sep) {
    size_t i = 0;
    int64_t n = 0;
    while (i < s.size()) {
      while (i < s.size() && IsWs(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && n == maxsplit) {
        out.push_back(StripChars(s.substr(i), nullptr, false, true));
        return out;
      }
      size_t j = i;
      while (j < s.size() && !IsWs(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      ++n;
      i = j;
    }
    return out;
  }
  if (sep->empty()) Fail("empty separator");
  size_t start = 0;
  int64_t n = 0;
  while (true) {
    size_t p = s.find(*sep, start);
    if (p == std::string::npos || (maxsplit >= 0 && n == maxsplit)) break;
    out.push_back(s.substr(start, p - start));
    start = p + sep->size();
    ++n;
  }
  out.push_back(s.substr(start));
  return out;
}

bool Equal(const Val& a, const Val& b) {
  if (a.undef || b.undef) return a.undef && b.undef;
  if (a.j.is_number() && b.j.is_number()) return a.j.get<double>() == b.j.get<double>();
  if (a.j.is_boolean() && b.j.is_number()) return (a.j.get<bool>() ? 1.0 : 0.0) == b.j.get<double>();
  if (b.j.is_boolean() && a.j.is_number()) return (b.j.get<bool>() ? 1.0 : 0.0) == a.j.get<double>();
  return a.j == b.j;
}

int Compare(const Val& a, const Val& b) {
  const ojson& x = Need(a, "comparison");
  const ojson& y = Need(b, "comparison");
  if (x.is_number() && y.is_number()) {
    double p = x.get<double>(), q = y.get<double>();
    return p < q ? -1 : p > q ? 1 : 0;
  }
  if (x.is_string() && y.is_string()) return x.get<std::string>().compare(y.get<std::string>()) < 0 ? -1 : x == y ? 0 : 1;
  Fail("'<' not supported between these types");
}

bool Contains(const Val& container, const Val& item) {
  const ojson& c = Need(container, "'in'");
  if (c.is_string()) {
    if (!item.j.is_string() || item.undef) Fail("'in <string>' requires string as left operand");
    return c.get<std::string>().find(item.j.get<std::string>()) != std::string::npos;
  }
  if (c.is_array()) {
    for (const auto& e : c)
      if (Equal(Val(e), item)) return true;
    return false;
  }
  if (c.is_object()) return item.j.is_string() && c.contains(item.j.get<std::string>());
  Fail("argument of type is not iterable");
}

// ------------------------------------------------------------------------------------------
// Renderer
// ------------------------------------------------------------------------------------------
enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const ojson& ctx) {
    scopes_.emplace_back();
    for (auto it = ctx.begin(); it != ctx.end(); ++it) scopes_[0][it.key()] = Val(it.value());
  }

  Flow Run(const Node& n, std::string* out) {
    if (++steps_ > 20'000'000 || out->size() > (256u << 20)) Fail("template too expensive to render");
    switch (n.kind) {
      case Node::kBody:
        for (const auto& c : n.children) {
          Flow f = Run(*c, out);
          if (f != Flow::kNormal) return f;
        }
        return Flow::kNormal;
      case Node::kText:
        *out += n.text;
        return Flow::kNormal;
      case Node::kOutput:
        *out += PyStr(Eval(*n.exprs[0]));
        return Flow::kNormal;
      case Node::kIf:
        for (size_t k = 0; k < n.exprs.size(); ++k)
          if (Truthy(Eval(*n.exprs[k]))) return Run(*n.children[k], out);
        if (n.children.size() > n.exprs.size()) return Run(*n.children.back(), out);
        return Flow::kNormal;
      case Node::kFor:
        return RunFor(n, out);
      case Node::kSet: {
        Val v = Eval(*n.exprs[0]);
        if (n.attr.empty()) {
          scopes_.back()[n.text] = v;
        } else {
          Val* ns = Lookup(n.text);
          if (!ns || !ns->j.is_object()) Fail("cannot set attribute of '" + n.text + "'");
          ns->j[n.attr] = v.undef ? ojson() : v.j;
        }
        return Flow::kNormal;
      }
      case Node::kSetBlock: {
        std::string s;
        Run(*n.children[0], &s);
        scopes_.back()[n.text] = Val(ojson(s));
        return Flow::kNormal;
      }
      case Node::kMacro:
        macros_[n.text] = &n;
        return Flow::kNormal;
      case Node::kBreak:
        return Flow::kBreak;
      case Node::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

 private:
  Val* Lookup(const std::string& name) {
    for (size_t k = scopes_.size(); k-- > 0;) {
      auto it = scopes_[k].find(name);
      if (it != scopes_[k].end()) return &it->second;
    }
    return nullptr;
  }

  Flow RunFor(const Node& n, std::string* out) {
    std::vector<Val> items = Iterate(Eval(*n.exprs[0]));
    auto bind = [&](const Val& item) {
      if (n.targets.size() == 1) {
        scopes_.back()[n.targets[0]] = item;
      } else {
        const ojson& j = Need(item, "for-loop unpacking");
        if (!j.is_array() || j.size() != n.targets.size()) Fail("cannot unpack for-loop item");
        for (size_t t = 0; t < n.targets.size(); ++t) scopes_.back()[n.targets[t]] = Val(j[t]);
      }
    };
    if (n.exprs.size() > 1) {  // inline filter
      std::vector<Val> kept;
      for (const auto& it : items) {
        scopes_.emplace_back();
        bind(it);
        if (Truthy(Eval(*n.exprs[1]))) kept.push_back(it);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.children.size() > 1) return Run(*n.children[1], out);
      return Flow::kNormal;
    }
    const size_t len = items.size();
    for (size_t i = 0; i < len; ++i) {
      scopes_.emplace_back();
      bind(items[i]);
      ojson loop = {{"index", i + 1}, {"index0", i}, {"revindex", len - i}, {"revindex0", len - i - 1},
                    {"first", i == 0}, {"last", i + 1 == len}, {"length", len}};
      loop["previtem"] = i > 0 && !items[i - 1].undef ? items[i - 1].j : ojson();
      loop["nextitem"] = i + 1 < len && !items[i + 1].undef ? items[i + 1].j : ojson();
      scopes_.back()["loop"] = Val(loop);
      Flow f = Run(*n.children[0], out);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Val GetAttr(const Val& obj, const std::string& name) {
    if (obj.undef) Fail("'" + name + "' of an undefined value");
    const ojson& j = obj.j;
    if (j.is_object()) {
      auto it = j.find(name);
      if (it != j.end()) return Val(*it);
      return Val::Undef();
    }
    if (j.is_array() && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
      size_t k = std::stoul(name);
      return k < j.size() ? Val(j[k]) : Val::Undef();
    }
    return Val::Undef();
  }

  Val GetItem(const Val& obj, const Val& key) {
    if (obj.undef) Fail("subscript of an undefined value");
    const ojson& j = obj.j;
    if (j.is_object()) {
      if (!key.j.is_string()) return Val::Undef();
      auto it = j.find(key.j.get<std::string>());
      return it != j.end() ? Val(*it) : Val::Undef();
    }
    if ((j.is_array() || j.is_string()) && key.j.is_number_integer()) {
      int64_t k = key.j.get<int64_t>();
      if (j.is_array()) {
        int64_t n = static_cast<int64_t>(j.size());
        if (k < 0) k += n;
        return k >= 0 && k < n ? Val(j[k]) : Val::Undef();
      }
      auto cps = CodePoints(j.get<std::string>());
      int64_t n = static_cast<int64_t>(cps.size());
      if (k < 0) k += n;
      return k >= 0 && k < n ? Val(ojson(cps[k])) : Val::Undef();
    }
    return Val::Undef();
  }

  Val Slice(const Val& obj, const Expr* a, const Expr* b, const Expr* c) {
    const ojson& j = Need(obj, "slice");
    std::vector<ojson> items;
    bool is_str = j.is_string();
    if (is_str) for (auto& cp : CodePoints(j.get<std::string>())) items.emplace_back(cp);
    else if (j.is_array()) for (const auto& e : j) items.push_back(e);
    else Fail("value cannot be sliced");
    int64_t n = static_cast<int64_t>(items.size());
    int64_t step = c ? Eval(*c).j.get<int64_t>() : 1;
    if (step == 0) Fail("slice step cannot be zero");
    auto norm = [&](const Expr* e, int64_t dflt) {
      if (!e) return dflt;
      int64_t v = Eval(*e).j.get<int64_t>();
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    int64_t start = norm(a, step > 0 ? 0 : n - 1), stop = norm(b, step > 0 ? n : -1);
    ojson out = ojson::array();
    std::string s;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (is_str) s += items[k].get<std::string>();
      else out.push_back(items[k]);
    }
    return is_str ? Val(ojson(s)) : Val(out);
  }

  Val CallMethod(const Val& obj, const std::string& m, const std::vector<Val>& a) {
    const ojson& j = Need(obj, ("method ." + m + "()").c_str());
    auto arg_str = [&](size_t k) -> const std::string* {
      if (k >= a.size() || a[k].undef || a[k].j.is_null()) return nullptr;
      if (!a[k].j.is_string()) Fail("." + m + "() needs a string argument");
      return &a[k].j.get_ref<const std::string&>();
    };
    if (j.is_string()) {
      const std::string& s = j.get_ref<const std::string&>();
      if (m == "strip") return Val(ojson(StripChars(s, arg_str(0), true, true)));
      if (m == "lstrip") return Val(ojson(StripChars(s, arg_str(0), true, false)));
      if (m == "rstrip") return Val(ojson(StripChars(s, arg_str(0), false, true)));
      if (m == "split") return Val(SplitStr(s, arg_str(0), a.size() > 1 ? a[1].j.get<int64_t>() : -1));
      if (m == "startswith" || m == "endswith") {
        const std::string* p = arg_str(0);
        if (!p) Fail("." + m + "() needs an argument");
        bool r = m == "startswith" ? s.compare(0, p->size(), *p) == 0
                                   : s.size() >= p->size() && s.compare(s.size() - p->size(), p->size(), *p) == 0;
        return Val(ojson(r));
      }
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (auto& ch : r) ch = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(ch)) : std::tolower(static_cast<unsigned char>(ch)));
        return Val(ojson(r));
      }
      if (m == "replace") {
        const std::string *from = arg_str(0), *to = arg_str(1);
        if (!from || !to) Fail(".replace() needs two strings");
        std::string r;
        size_t p = 0;
        if (from->empty()) return Val(ojson(s));
        while (true) {
          size_t q = s.find(*from, p);
          if (q == std::string::npos) break;
          r += s.substr(p, q - p) + *to;
          p = q + from->size();
        }
        return Val(ojson(r + s.substr(p)));
      }
      if (m == "find") {
        const std::string* p = arg_str(0);
        size_t q = p ? s.find(*p) : std::string::npos;
        return Val(ojson(q == std::string::npos ? int64_t{-1} : static_cast<int64_t>(q)));
      }
    }
    if (j.is_object()) {
      if (m == "items") {
        ojson out = ojson::array();
        for (auto it = j.begin(); it != j.end(); ++it) out.push_back(ojson::array({it.key(), it.value()}));
        return Val(out);
      }
      if (m == "keys") {
        ojson out = ojson::array();
        for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.key());
        return Val(out);
      }
      if (m == "values") {
        ojson out = ojson::array();
        for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.value());
        return Val(out);
      }
      if (m == "get") {
        const std::string* k = arg_str(0);
        if (k && j.contains(*k)) return Val(j.at(*k));
        return a.size() > 1 ? a[1] : Val(ojson());
      }
    }
    Fail("unsupported method ." + m + "()");
  }

  Val CallGlobal(const std::string& name, const std::vector<Val>& a,
                 const std::vector<std::pair<std::string, Val>>& kw) {
    if (name == "raise_exception") Fail(a.empty() ? "raise_exception()" : PyStr(a[0]));
    if (name == "namespace" || name == "dict") {
      ojson o = ojson::object();
      for (const auto& [k, v] : kw) o[k] = v.undef ? ojson() : v.j;
      return Val(o);
    }
    if (name == "range") {
      int64_t start = 0, stop, step = 1;
      if (a.size() == 1) stop = a[0].j.get<int64_t>();
      else if (a.size() >= 2) { start = a[0].j.get<int64_t>(); stop = a[1].j.get<int64_t>(); if (a.size() > 2) step = a[2].j.get<int64_t>(); }
      else Fail("range() needs arguments");
      if (step == 0) Fail("range() step cannot be zero");
      if ((stop - start) / step > 1000000) Fail("range() too large");
      ojson out = ojson::array();
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(k);
      return Val(out);
    }
    auto mit = macros_.find(name);
    if (mit != macros_.end()) {
      if (call_depth_ >= 64) Fail("macro recursion too deep");
      const Node& m = *mit->second;
      scopes_.emplace_back();
      for (size_t k = 0; k < m.targets.size(); ++k) {
        Val v = k < a.size() ? a[k] : (m.exprs[k] ? Eval(*m.exprs[k]) : Val::Undef());
        for (const auto& [kn, kv] : kw)
          if (kn == m.targets[k]) v = kv;
        scopes_.back()[m.targets[k]] = v;
      }
      std::string s;
      ++call_depth_;
      Run(*m.children[0], &s);
      --call_depth_;
      scopes_.pop_back();
      return Val(ojson(s));
    }
    if (name == "strftime_now") Fail("strftime_now() is not supported (output would depend on the clock)");
    Fail("'" + name + "' is undefined or not callable");
  }

  bool Test(const std::string& t, const Val& v, const std::vector<Val>& a) {
    const ojson& j = v.j;
    if (t == "defined") return !v.undef;
    if (t == "undefined") return v.undef;
    if (t == "none") return !v.undef && j.is_null();
    if (t == "string") return !v.undef && j.is_string();
    if (t == "number") return !v.undef && j.is_number();
    if (t == "integer") return !v.undef && j.is_number_integer();
    if (t == "float") return !v.undef && j.is_number_float();
    if (t == "mapping") return !v.undef && j.is_object();
    if (t == "iterable") return !v.undef && (j.is_array() || j.is_object() || j.is_string());
    if (t == "sequence") return !v.undef && (j.is_array() || j.is_object() || j.is_string());
    if (t == "boolean") return !v.undef && j.is_boolean();
    if (t == "true") return !v.undef && j.is_boolean() && j.get<bool>();
    if (t == "false") return !v.undef && j.is_boolean() && !j.get<bool>();
    if (t == "callable") return false;
    if (t == "odd" || t == "even") return (Need(v, "test").get<int64_t>() % 2 != 0) == (t == "odd");
    if (t == "divisibleby") return Need(v, "test").get<int64_t>() % a.at(0).j.get<int64_t>() == 0;
    if (t == "lower" || t == "upper") {
      std::string s = PyStr(v);
      for (char c : s)
        if (std::isalpha(static_cast<unsigned char>(c)) && (t == "lower" ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c)))) return false;
      return true;
    }
    if (a.empty()) Fail("test '" + t + "' needs an argument");
    if (t == "eq" || t == "equalto" || t == "sameas") return Equal(v, a[0]);
    if (t == "ne") return !Equal(v, a[0]);
    if (t == "lt") return Compare(v, a[0]) < 0;
    if (t == "gt") return Compare(v, a[0]) > 0;
    if (t == "le") return Compare(v, a[0]) <= 0;
    if (t == "ge") return Compare(v, a[0]) >= 0;
    if (t == "in") return Contains(a[0], v);
    Fail("unknown test '" + t + "'");
  }

  Val Filter(const std::string& f, const Val& v, const std::vector<Val>& a,
             const std::vector<std::pair<std::string, Val>>& kw) {
    auto kwarg = [&](const char* k, size_t pos) -> const Val* {
      for (const auto& [kn, kv] : kw)
        if (kn == k) return &kv;
      return pos < a.size() ? &a[pos] : nullptr;
    };
    if (f == "default" || f == "d") {
      const Val* b = kwarg("boolean", 1);
      bool use = v.undef || (b && Truthy(*b) && !Truthy(v));
      if (!use) return v;
      const Val* d = kwarg("default_value", 0);
      return d ? *d : Val(ojson(""));
    }
    if (f == "safe") return v;
    if (f == "string") return Val(ojson(PyStr(v)));
    if (f == "tojson") {
      const Val* ind = kwarg("indent", 0);
      int indent = ind && !ind->undef && !ind->j.is_null() ? static_cast<int>(ind->j.get<int64_t>()) : -1;
      std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
      if (const Val* sep = kwarg("separators", 99); sep && sep->j.is_array() && sep->j.size() == 2) {
        item_sep = sep->j[0].get<std::string>();
        key_sep = sep->j[1].get<std::string>();
      }
      const Val* sk = kwarg("sort_keys", 99);
      std::string out;
      PyJsonDump(v.undef ? ojson() : v.j, indent, item_sep, key_sep, sk && Truthy(*sk), 0, &out);
      return Val(ojson(out));
    }
    const ojson& j = Need(v, ("filter " + f).c_str());
    if (f == "length" || f == "count") {
      if (j.is_string()) return Val(ojson(static_cast<int64_t>(CodePoints(j.get<std::string>()).size())));
      if (j.is_array() || j.is_object()) return Val(ojson(static_cast<int64_t>(j.size())));
      Fail("object has no length");
    }
    if (f == "trim") return Val(ojson(StripChars(PyStr(v), nullptr, true, true)));
    if (f == "lower" || f == "upper") return CallMethod(Val(ojson(PyStr(v))), f, {});
    if (f == "capitalize" || f == "title") {
      std::string s = PyStr(v);
      bool start = true;
      for (auto& c : s) {
        auto uc = static_cast<unsigned char>(c);
        c = static_cast<char>(start ? std::toupper(uc) : std::tolower(uc));
        start = f == "title" ? !std::isalpha(uc) : false;
      }
      return Val(ojson(s));
    }
    if (f == "replace") return CallMethod(Val(ojson(PyStr(v))), "replace", a);
    if (f == "join") {
      const Val* sep = kwarg("d", 0);
      const Val* attr = kwarg("attribute", 1);
      std::string out;
      bool first = true;
      for (const auto& e : Iterate(v)) {
        if (!first && sep) out += PyStr(*sep);
        out += PyStr(attr ? GetAttr(e, PyStr(*attr)) : e);
        first = false;
      }
      return Val(ojson(out));
    }
    if (f == "first" || f == "last") {
      auto items = Iterate(v);
      if (items.empty()) return Val::Undef();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "list") {
      ojson out = ojson::array();
      for (const auto& e : Iterate(v)) out.push_back(e.j);
      return Val(out);
    }
    if (f == "items") return CallMethod(v, "items", {});
    if (f == "reverse") {
      if (j.is_string()) {
        auto cps = CodePoints(j.get<std::string>());
        std::string s;
        for (size_t k = cps.size(); k-- > 0;) s += cps[k];
        return Val(ojson(s));
      }
      ojson out = ojson::array();
      auto items = Iterate(v);
      for (size_t k = items.size(); k-- > 0;) out.push_back(items[k].j);
      return Val(out);
    }
    if (f == "int") {
      if (j.is_number()) return Val(ojson(static_cast<int64_t>(j.get<double>())));
      try { return Val(ojson(std::stoll(PyStr(v)))); } catch (...) { return Val(ojson(0)); }
    }
    if (f == "float") {
      if (j.is_number()) return Val(ojson(j.get<double>()));
      try { return Val(ojson(std::stod(PyStr(v)))); } catch (...) { return Val(ojson(0.0)); }
    }
    if (f == "abs") {
      if (j.is_number_integer()) return Val(ojson(std::llabs(j.get<int64_t>())));
      return Val(ojson(std::fabs(j.get<double>())));
    }
    if (f == "selectattr" || f == "rejectattr") {
      if (a.empty()) Fail(f + " needs an attribute");
      std::string attr = PyStr(a[0]);
      ojson out = ojson::array();
      for (const auto& e : Iterate(v)) {
        Val x = GetAttr(e, attr);
        bool ok = a.size() > 1 ? Test(PyStr(a[1]), x, std::vector<Val>(a.begin() + 2, a.end())) : Truthy(x);
        if (ok == (f == "selectattr")) out.push_back(e.j);
      }
      return Val(out);
    }
    if (f == "map") {
      ojson out = ojson::array();
      const Val* attr = nullptr;
      for (const auto& [kn, kv] : kw)
        if (kn == "attribute") attr = &kv;
      for (const auto& e : Iterate(v)) {
        if (attr) {
          Val x = GetAttr(e, PyStr(*attr));
          out.push_back(x.undef ? ojson() : x.j);
        } else if (!a.empty()) {
          Val x = Filter(PyStr(a[0]), e, std::vector<Val>(a.begin() + 1, a.end()), {});
          out.push_back(x.undef ? ojson() : x.j);
        } else {
          Fail("map() needs a filter name or attribute=");
        }
      }
      return Val(out);
    }
    if (f == "unique") {
      ojson out = ojson::array();
      for (const auto& e : Iterate(v)) {
        bool seen = false;
        for (const auto& o : out) seen = seen || Equal(Val(o), e);
        if (!seen) out.push_back(e.j);
      }
      return Val(out);
    }
    if (f == "sort") {
      auto items = Iterate(v);
      const Val* attr = kwarg("attribute", 99);
      const Val* rev = kwarg("reverse", 0);
      std::stable_sort(items.begin(), items.end(), [&](const Val& x, const Val& y) {
        return attr ? Compare(GetAttr(x, PyStr(*attr)), GetAttr(y, PyStr(*attr))) < 0 : Compare(x, y) < 0;
      });
      if (rev && Truthy(*rev)) std::reverse(items.begin(), items.end());
      ojson out = ojson::array();
      for (const auto& e : items) out.push_back(e.j);
      return Val(out);
    }
    if (f == "sum" || f == "min" || f == "max") {
      auto items = Iterate(v);
      if (f == "sum") {
        ojson acc = 0;
        for (const auto& e : items) acc = Binary("+", Val(acc), e).j;
        return Val(acc);
      }
      if (items.empty()) return Val::Undef();
      Val best = items[0];
      for (const auto& e : items)
        if ((f == "min") ? Compare(e, best) < 0 : Compare(e, best) > 0) best = e;
      return best;
    }
    if (f == "wordcount") return Val(ojson(static_cast<int64_t>(SplitStr(PyStr(v), nullptr, -1).size())));
    if (f == "indent") {
      const Val* w = kwarg("width", 0);
      const Val* first = kwarg("first", 1);
      std::string pad = w ? (w->j.is_string() ? w->j.get<std::string>() : std::string(w->j.get<int64_t>(), ' ')) : "    ";
      std::string s = PyStr(v), out;
      bool line_start = first && Truthy(*first);
      for (char c : s) {
        if (line_start && c != '\n') out += pad;
        line_start = false;
        out += c;
        if (c == '\n') line_start = true;
      }
      return Val(ojson(out));
    }
    Fail("unsupported filter '" + f + "'");
  }

  Val Binary(const std::string& op, const Val& x, const Val& y) {
    if (op == "~") return Val(ojson(PyStr(x) + PyStr(y)));
    if (op == "==") return Val(ojson(Equal(x, y)));
    if (op == "!=") return Val(ojson(!Equal(x, y)));
    if (op == "<") return Val(ojson(Compare(x, y) < 0));
    if (op == ">") return Val(ojson(Compare(x, y) > 0));
    if (op == "<=") return Val(ojson(Compare(x, y) <= 0));
    if (op == ">=") return Val(ojson(Compare(x, y) >= 0));
    if (op == "in") return Val(ojson(Contains(y, x)));
    if (op == "notin") return Val(ojson(!Contains(y, x)));
    const ojson& a = Need(x, ("operator " + op).c_str());
    const ojson& b = Need(y, ("operator " + op).c_str());
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Val(ojson(a.get<std::string>() + b.get<std::string>()));
      if (a.is_array() && b.is_array()) {
        ojson r = a;
        for (const auto& e : b) r.push_back(e);
        return Val(r);
      }
    }
    if (op == "*" && a.is_string() && b.is_number_integer()) {
      if (static_cast<double>(a.get_ref<const std::string&>().size()) * static_cast<double>(b.get<int64_t>()) > 1e7)
        Fail("string repetition too large");
      std::string r;
      for (int64_t k = 0; k < b.get<int64_t>(); ++k) r += a.get<std::string>();
      return Val(ojson(r));
    }
    if (!(a.is_number() || a.is_boolean()) || !(b.is_number() || b.is_boolean()))
      Fail("unsupported operand types for " + op);
    bool ints = (a.is_number_integer() || a.is_boolean()) && (b.is_number_integer() || b.is_boolean());
    double p = a.is_boolean() ? a.get<bool>() : a.get<double>();
    double q = b.is_boolean() ? b.get<bool>() : b.get<double>();
    int64_t pi = a.is_boolean() ? a.get<bool>() : a.is_number_integer() ? a.get<int64_t>() : 0;
    int64_t qi = b.is_boolean() ? b.get<bool>() : b.is_number_integer() ? b.get<int64_t>() : 0;
    if (op == "+") return ints ? Val(ojson(pi + qi)) : Val(ojson(p + q));
    if (op == "-") return ints ? Val(ojson(pi - qi)) : Val(ojson(p - q));
    if (op == "*") return ints ? Val(ojson(pi * qi)) : Val(ojson(p * q));
    if (op == "/") {
      if (q == 0) Fail("division by zero");
      return Val(ojson(p / q));
    }
    if (op == "//" || op == "%") {
      if (q == 0) Fail("division by zero");
      if (ints) {
        int64_t d = pi / qi, m = pi % qi;
        if (m != 0 && ((m < 0) != (qi < 0))) { d -= 1; m += qi; }
        return Val(ojson(op == "//" ? d : m));
      }
      double d = std::floor(p / q);
      return Val(ojson(op == "//" ? d : p - d * q));
    }
    if (op == "**") return ints && qi >= 0 ? Val(ojson(static_cast<int64_t>(std::llround(std::pow(p, q))))) : Val(ojson(std::pow(p, q)));
    Fail("unknown operator " + op);
  }

 public:
  Val Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLit:
        return e.negate ? Val::Undef() : Val(e.lit);
      case Expr::kName: {
        Val* v = Lookup(e.name);
        return v ? *v : Val::Undef();
      }
      case Expr::kList: {
        ojson out = ojson::array();
        for (const auto& a : e.args) {
          Val v = Eval(*a);
          out.push_back(v.undef ? ojson() : v.j);
        }
        return Val(out);
      }
      case Expr::kDict: {
        ojson out = ojson::object();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Val key = Eval(*e.args[k]), val = Eval(*e.args[k + 1]);
          out[PyStr(key)] = val.undef ? ojson() : val.j;
        }
        return Val(out);
      }
      case Expr::kAttr:
        return GetAttr(Eval(*e.args[0]), e.name);
      case Expr::kItem:
        return GetItem(Eval(*e.args[0]), Eval(*e.args[1]));
      case Expr::kSlice:
        return Slice(Eval(*e.args[0]), e.args[1].get(), e.args[2].get(), e.args[3].get());
      case Expr::kCall: {
        std::vector<Val> a;
        std::vector<std::pair<std::string, Val>> kw;
        for (size_t k = 1; k < e.args.size(); ++k) a.push_back(Eval(*e.args[k]));
        for (const auto& [kn, kv] : e.kwargs) kw.push_back({kn, Eval(*kv)});
        const Expr& callee = *e.args[0];
        if (callee.kind == Expr::kAttr) return CallMethod(Eval(*callee.args[0]), callee.name, a);
        if (callee.kind == Expr::kName) return CallGlobal(callee.name, a, kw);
        Fail("value is not callable");
      }
      case Expr::kFilter: {
        Val v = Eval(*e.args[0]);
        std::vector<Val> a;
        std::vector<std::pair<std::string, Val>> kw;
        for (size_t k = 1; k < e.args.size(); ++k) a.push_back(Eval(*e.args[k]));
        for (const auto& [kn, kv] : e.kwargs) kw.push_back({kn, Eval(*kv)});
        return Filter(e.name, v, a, kw);
      }
      case Expr::kTest: {
        Val v = Eval(*e.args[0]);
        std::vector<Val> a;
        for (size_t k = 1; k < e.args.size(); ++k) a.push_back(Eval(*e.args[k]));
        return Val(ojson(Test(e.name, v, a) != e.negate));
      }
      case Expr::kNeg: {
        Val v = Eval(*e.args[0]);
        return Binary("-", Val(ojson(0)), v);
      }
      case Expr::kNot:
        return Val(ojson(!Truthy(Eval(*e.args[0]))));
      case Expr::kAnd: {
        Val a = Eval(*e.args[0]);
        return Truthy(a) ? Eval(*e.args[1]) : a;
      }
      case Expr::kOr: {
        Val a = Eval(*e.args[0]);
        return Truthy(a) ? a : Eval(*e.args[1]);
      }
      case Expr::kCond:
        return Truthy(Eval(*e.args[0])) ? Eval(*e.args[1]) : Eval(*e.args[2]);
      case Expr::kBin:
        if (e.name == "+" || e.name == "-" || e.name == "*" || e.name == "/" || e.name == "//" ||
            e.name == "%" || e.name == "**" || e.name == "~" || e.name == "==" || e.name == "!=" ||
            e.name == "<" || e.name == ">" || e.name == "<=" || e.name == ">=" || e.name == "in" ||
            e.name == "notin")
          return Binary(e.name, Eval(*e.args[0]), Eval(*e.args[1]));
        Fail("unknown operator");
    }
    Fail("bad expression");
  }

 private:
  std::vector<std::unordered_map<std::string, Val>> scopes_;
  std::unordered_map<std::string, const Node*> macros_;
  int call_depth_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace

Template::Template() = default;
Template::~Template() = default;

StatusOr<std::unique_ptr<Template>> Template::Compile(const std::string& source) {
  auto t = std::unique_ptr<Template>(new Template);
  try {
    t->root_ = ParseTemplate(source);
  } catch (const UnsupportedError& e) {
    return Unimplemented(std::string("jinja: unsupported ") + e.what());
  } catch (const SyntaxError& e) {
    return InvalidArgument(std::string("jinja: syntax error: ") + e.what());
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("jinja: ") + e.what());
  }
  return t;
}

StatusOr<std::string> Template::Render(const ojson& context) const {
  try {
    Renderer r(context);
    std::string out;
    r.Run(*root_, &out);
    return out;
  } catch (const RenderError& e) {
    return InvalidArgument(std::string("chat template error: ") + e.what());
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("chat template error: ") + e.what());
  }
}

}  // namespace ds::jinja
