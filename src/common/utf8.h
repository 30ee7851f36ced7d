// UTF-8 helpers shared by the tokenizer and the incremental detokenizer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ds {

// True if bytes is valid UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// Replaces invalid UTF-8 by U+FFFD per maximal subpart (Rust String::from_utf8_lossy /
// WHATWG / Python "replace" / Unicode "substitution of maximal subparts"); valid input is
// returned unchanged. A valid but truncated sequence at the end is one maximal subpart.
std::string Utf8Lossy(std::string_view bytes);

// Length of the longest prefix of `bytes` whose lossy decoding cannot change when more bytes
// follow: everything except a trailing valid-but-incomplete sequence.
size_t Utf8CompletePrefix(std::string_view bytes);

}  // namespace ds
