// A small Jinja2 interpreter for chat templates (the subset Hugging Face chat templates use),
// with the environment transformers renders them in: trim_blocks=True, lstrip_blocks=True,
// loop controls, namespace(), raise_exception(), tojson as json.dumps(ensure_ascii=False).
//
// Supported: {{ }}, {% %}, {# #} with '-' whitespace control; if/elif/else, for (one or two
// targets, `else`, inline `if` filter, loop.index/index0/revindex/revindex0/first/last/length/
// previtem/nextitem, break/continue), set (name, ns.attr, block set), generation blocks (their
// body is rendered), macros (positional and keyword arguments, defaults); expressions:
// literals (string, int, float, true/false/none, list, dict, tuple as list), attribute /
// subscript / slice access, calls, filters, tests (`is [not] x`), arithmetic (+ - * / // % **),
// `~`, comparisons, in / not in, and / or / not, `a if c else b`.
// Filters: length count trim tojson string lower upper title capitalize default d join first
// last list items reverse int float abs replace safe selectattr rejectattr map unique sort
// indent sum min max wordcount. Globals: namespace dict range raise_exception.
// Methods: str strip lstrip rstrip split startswith endswith upper lower replace find;
// dict items keys values get.
// Tests: defined undefined none string number integer float mapping iterable sequence boolean
// true false callable odd even divisibleby eq equalto sameas ne lt gt le ge in lower upper.
// Limits (untrusted templates): nesting depth 400, macro recursion 64, range() 1e6 items,
// 2e7 render steps, 256 MiB output.
// Anything else fails at compile time (Unimplemented, naming the construct) or at render
// time (InvalidArgument with the template's message, e.g. raise_exception()).
//
// Values are nlohmann::ordered_json (key order kept, as Python dicts); Undefined is a
// separate state. Output of values follows Python's str(): True/False/None, repr of lists.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ds::jinja {

class Template {
 public:
  // Parses the template. Errors: InvalidArgument (syntax) or Unimplemented (a construct
  // outside the subset), with the offending tag.
  static StatusOr<std::unique_ptr<Template>> Compile(const std::string& source);
  ~Template();

  // Renders with the variables of `context` (a JSON object) as globals.
  StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

  struct Node;

 private:
  Template();
  std::unique_ptr<Node> root_;
};

}  // namespace ds::jinja
