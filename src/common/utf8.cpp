// UTF-8 validation and repair (see utf8.h).
#include "common/utf8.h"

#include <cstdint>
#include <cstring>

namespace ds {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), 0 if the bytes from i form an
// invalid sequence, -k if they are a valid but truncated prefix of k bytes at the end of s.
// For invalid input *bad_len receives the length of the maximal subpart (>= 1).
int Utf8SeqLen(const unsigned char* s, size_t n, size_t i, int* bad_len) {
  unsigned char b = s[i];
  if (b < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b == 0xE0) {
    need = 2; lo = 0xA0;
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    need = 2;
  } else if (b == 0xED) {
    need = 2; hi = 0x9F;
  } else if (b == 0xF0) {
    need = 3; lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) {
    need = 3;
  } else if (b == 0xF4) {
    need = 3; hi = 0x8F;
  } else {
    *bad_len = 1;
    return 0;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= n) return -k;  // truncated: k bytes present and valid so far
    unsigned char c = s[i + k];
    unsigned char l = (k == 1) ? lo : 0x80, h = (k == 1) ? hi : 0xBF;
    if (c < l || c > h) {
      *bad_len = k;
      return 0;
    }
  }
  return need + 1;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size(), i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    int bad = 0;
    int len = Utf8SeqLen(s, n, i, &bad);
    if (len <= 0) return false;
    i += len;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  if (IsValidUtf8(bytes)) return std::string(bytes);
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size(), i = 0;
  std::string out;
  out.reserve(n + 8);
  while (i < n) {
    int bad = 0;
    int len = Utf8SeqLen(s, n, i, &bad);
    if (len > 0) {
      out.append(bytes.data() + i, len);
      i += len;
    } else if (len < 0) {  // truncated at the end: one maximal subpart
      out.append(kReplacement);
      i += static_cast<size_t>(-len);
    } else {
      out.append(kReplacement);
      i += bad;
    }
  }
  return out;
}

size_t Utf8CompletePrefix(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size(), i = 0;
  while (i < n) {
    int bad = 0;
    int len = Utf8SeqLen(s, n, i, &bad);
    if (len > 0) i += len;
    else if (len < 0) return i;
    else i += bad;
  }
  return n;
}

}  // namespace ds
