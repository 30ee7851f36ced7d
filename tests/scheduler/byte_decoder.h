// Test TokenDecoder: ids 0..255 are raw bytes, other ids decode to nothing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "scheduler/detokenizer.h"

namespace ds::test {

class ByteDecoder : public TokenDecoder {
 public:
  std::string Decode(const std::vector<int32_t>& ids, bool) const override {
    std::string s;
    for (int32_t id : ids)
      if (id >= 0 && id < 256) s.push_back(static_cast<char>(id));
    return Utf8Lossy(s);
  }
  std::string_view TokenBytes(int32_t id, bool) const override {
    static const std::string* table = [] {
      auto* t = new std::string[256];
      for (int i = 0; i < 256; ++i) t[i] = std::string(1, static_cast<char>(i));
      return t;
    }();
    return id >= 0 && id < 256 ? std::string_view(table[id]) : std::string_view();
  }
};

}  // namespace ds::test
