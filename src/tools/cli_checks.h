// CLI11 number validators with readable messages. CLI11 2.1's CLI::PositiveNumber and
// CLI::NonNegativeNumber report "Value -1 not in range 0.000000 to 1797693...(300 digits)";
// these say "--flag: must be >= 0, got -1".
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace ds::tools {

// strict: value > 0 (POSITIVE); else value >= 0 (NONNEGATIVE).
inline CLI::Validator SignCheck(bool strict) {
  return CLI::Validator(
      [strict](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return "must be a number, got '" + s + "'";
        if (strict ? v > 0 : v >= 0) return {};
        return std::string(strict ? "must be > 0" : "must be >= 0") + ", got " + s;
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}
inline const CLI::Validator kPositive = SignCheck(true);
inline const CLI::Validator kNonNegative = SignCheck(false);

}  // namespace ds::tools
