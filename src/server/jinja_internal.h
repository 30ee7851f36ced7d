// Internal declarations shared by the Jinja parser (jinja_parse.cpp) and renderer (jinja.cpp).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/jinja.h"

namespace ds::jinja {
namespace internal {

using ojson = nlohmann::ordered_json;

// Errors inside the interpreter are exceptions, turned into Status at the API edge.
struct SyntaxError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct UnsupportedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct RenderError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool IsWs(char c);
std::string StripChars(const std::string& s, const std::string* chars, bool left, bool right);

struct Expr;
using ExprP = std::shared_ptr<Expr>;
struct Expr {
  enum Kind { kLit, kName, kList, kDict, kAttr, kItem, kSlice, kCall, kFilter, kTest, kNeg,
              kNot, kBin, kAnd, kOr, kCond } kind;
  ojson lit;
  std::string name;  // name / attr / filter / test / binary op
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  bool negate = false;
};


// Parses a template source (Jinja lexer rules + the statement subset) into its node tree.
// Throws SyntaxError / UnsupportedError.
std::unique_ptr<Template::Node> ParseTemplate(const std::string& source);

}  // namespace internal

struct Template::Node {
  enum Kind { kBody, kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue } kind = kBody;
  std::string text;                   // kText; kSet target name; kMacro name
  std::string attr;                   // kSet: ns.attr
  std::vector<std::string> targets;   // kFor targets; kMacro params
  std::vector<internal::ExprP> exprs;           // kOutput [e]; kIf conds; kFor [iter, filter]; kSet [value]; kMacro defaults
  std::vector<std::unique_ptr<Node>> children;  // kBody items; kIf branch bodies (+ else); kFor [body, else]
};

}  // namespace ds::jinja
