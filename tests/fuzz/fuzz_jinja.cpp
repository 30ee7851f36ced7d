// libFuzzer target for the chat-template Jinja interpreter: any template text must give a clean
// Status at compile or render time (never a crash, a hang or unbounded memory).
// Build: CC=clang CXX=clang++ cmake -B build-fuzz -DDS_FUZZ=ON -DDS_TESTS=OFF
// Run:   build-fuzz/fuzz_jinja -max_total_time=60 -timeout=10
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "server/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string src(reinterpret_cast<const char*>(data), size);
  auto t = ds::jinja::Template::Compile(src);
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();
    return 0;
  }
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi 中文"},
                 {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
                  "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                 {"role": "tool", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  auto out = (*t)->Render(ctx);
  if (!out.ok() && out.status().message().empty()) std::abort();
  return 0;
}
